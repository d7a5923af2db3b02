// expect: cannot convert value of type 'PictureID' to expected argument type 'ChatID'
import Chorus

func misuse(_ node: Node, picture: PictureID) async throws {
    try await node.sendMessage(picture, text: "hi")
}
