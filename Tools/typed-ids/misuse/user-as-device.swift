// expect: cannot convert value of type 'UserID' to expected argument type 'DeviceID'
import Chorus

func misuse(_ node: Node) async throws {
    try await node.moveRights(1, to: node.identity.user)
}
