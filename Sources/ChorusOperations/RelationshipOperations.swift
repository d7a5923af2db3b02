import ChorusCrypto
import ChorusEvents
import ChorusNode

/// Follow, unfollow, like, unlike, block or unblock one target
/// (Specs/projections.md §6.4): `POST`/`DELETE /v1/following/{user}`,
/// `/v1/likes/{object}`, `/v1/blocks/{user}`; `chorus follow USER` and the rest.
public struct Relate: NodeOperation {
    /// Which relationship, added or withdrawn.
    public enum Verb: String, Sendable, CaseIterable {
        case follow, unfollow, like, unlike, block, unblock

        /// The past tense, for the summary.
        public var done: String {
            switch self {
            case .follow: "Followed"
            case .unfollow: "Unfollowed"
            case .like: "Liked"
            case .unlike: "Unliked"
            case .block: "Blocked"
            case .unblock: "Unblocked"
            }
        }
    }

    /// `{"target": …}`: the user or object.
    public struct Target: Encodable, Sendable {
        /// The target's id in hex.
        public let target: String
    }

    /// The relationship.
    public let verb: Verb
    /// The user (follow, block) or the picture or message (like).
    public let target: Bytes32

    /// `verb` of `target`.
    public init(_ verb: Verb, _ target: Bytes32) {
        self.verb = verb
        self.target = target
    }

    /// Signs and commits the event; a like names a message when this node holds one by that id, else a picture.
    public func run(on node: Node) async throws -> MutationReport<Target> {
        let fields = Target(target: target.hex)
        let summary = "\(verb.done) \(target.short)"
        switch verb {
        case .follow: return MutationReport(fields, try await node.follow(UserID(target)), summary: summary)
        case .unfollow: return MutationReport(fields, try await node.unfollow(UserID(target)), summary: summary)
        case .block: return MutationReport(fields, try await node.block(UserID(target)), summary: summary)
        case .unblock: return MutationReport(fields, try await node.unblock(UserID(target)), summary: summary)
        case .like, .unlike:
            let like = verb == .like
            if try node.projections.message(MessageID(target)) != nil {
                let message = MessageID(target)
                return MutationReport(fields, try await like ? node.like(message) : node.unlike(message), summary: summary)
            }
            let picture = PictureID(target)
            return MutationReport(fields, try await like ? node.like(picture) : node.unlike(picture), summary: summary)
        }
    }
}

extension Relate.Target: ReportFields {
    /// `{"target"}`.
    public static var fields: [(String, JSONSchema)] { [("target", .hex32)] }
}
