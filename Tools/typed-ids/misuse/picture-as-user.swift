// expect: cannot convert value of type 'PictureID' to expected argument type 'UserID'
import Chorus

func misuse(_ node: Node, picture: PictureID) async throws {
    try await node.follow(picture)
}
