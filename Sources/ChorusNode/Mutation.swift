import ChorusCrypto
import ChorusEvents
import ChorusProjections

/// Whether a stored event took effect. Every validly signed event that fits
/// its feed is stored; the projections decide, identically on every
/// replica, whether it changes anything (Specs/projections.md §2), and say
/// why not with a stable code (`duplicate_receipt`, `beyond_rights`, …).
public enum Effect: Hashable, Sendable {
    /// The event changed the state it targets.
    case applied
    /// The event is stored and synced but changes nothing, for the reason
    /// given (its `code` is stable: Specs/projections.md §4).
    case noEffect(NoEffect)

    /// Whether the event took effect.
    public var isApplied: Bool { self == .applied }

    /// The no-effect code, or nil when the event took effect.
    public var code: String? {
        if case .noEffect(let why) = self { return why.code }
        return nil
    }
}

/// What a mutation did: the signed event, durable with the projections it
/// changed, the object it concerns, and its effect as of that commit. An
/// event that took no effect here can take effect later (an event it depends
/// on arrives by sync), and the reverse; `Node.noEffect(_:)` answers for
/// the current state.
///
/// `Object` is the kind of id the mutation concerns: `Mutation<PictureID>`
/// from `addPicture` carries the new picture's id, `Mutation<MessageID>` from
/// `sendMessage` the new message's.
public struct Mutation<Object: TypedID>: Hashable, Sendable {
    /// The signed event as committed.
    package let event: Event
    /// The object the mutation concerns: the new picture of `addPicture`, the
    /// new chat of `createChat`, the new message of `sendMessage`, the user
    /// of a profile edit or follow.
    public let object: Object
    /// Whether the event took effect as of its commit, or why not.
    public let effect: Effect

    /// Pairs an event with its object and effect; `Node` builds these after each commit.
    package init(event: Event, object: Object, effect: Effect) {
        self.event = event
        self.object = object
        self.effect = effect
    }

    /// The event id.
    public var id: EventID { event.id }
    /// The event's sequence number in its author's feed.
    public var seq: UInt64 { event.seq }
    /// When the event was written (its hybrid logical clock; `hlc.date` as a `Date`).
    public var hlc: HLC { event.hlc }
    /// The event's kind, such as `picture.created`.
    package var kind: EventKind { event.kind }
    /// Whether the event took effect as of its commit.
    public var isApplied: Bool { effect.isApplied }
}
