// expect: cannot convert value of type 'DeviceID' to expected argument type 'UserID'
import Chorus

func misuse(_ node: Node) throws {
    _ = try node.balance(of: node.identity.device)
}
