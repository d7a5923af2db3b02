// Every call here passes the kind of id it names; this must typecheck.
import Chorus

func correct(_ node: Node, picture: PictureID, chat: ChatID, message: MessageID) async throws {
    try await node.deletePicture(picture)
    try await node.follow(node.identity.user)
    try await node.sendMessage(chat, text: "hi", picture: picture)
    try await node.editMessage(message, text: "hello")
    try await node.moveRights(1, to: node.identity.device)
    _ = try node.profile(of: node.identity.user)
    _ = try node.likes(of: message)
}
