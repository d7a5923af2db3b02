// expect: requires that 'UserID' conform to 'Likeable'
import Chorus

func misuse(_ node: Node) async throws {
    try await node.like(node.identity.user)
}
