// expect: cannot convert value of type 'ChatID' to expected argument type 'MessageID'
import Chorus

func misuse(_ node: Node, chat: ChatID) async throws {
    try await node.editMessage(chat, text: "hello")
}
