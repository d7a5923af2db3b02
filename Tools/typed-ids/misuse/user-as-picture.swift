// expect: cannot convert value of type 'UserID' to expected argument type 'PictureID'
import Chorus

func misuse(_ node: Node) async throws {
    try await node.deletePicture(node.identity.user)
}
