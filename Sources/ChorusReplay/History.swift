import ChorusEncryption
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusProjections

/// What became of one event, as the projections decided it.
public enum Decision: Hashable, Sendable {
    case applied
    /// Took effect, then a later event in merge order replaced or undid it.
    case superseded(by: EventID, how: String)
    case noEffect(NoEffect)

    public var code: String {
        switch self {
        case .applied: "applied"
        case .superseded: "superseded"
        case .noEffect(let n): n.code
        }
    }

    public var text: String {
        switch self {
        case .applied: "applied"
        case .superseded(let by, let how): "superseded: \(how) by \(by.short)"
        case .noEffect(let n): "no effect (\(n.code)): \(n.detail)"
        }
    }
}

public struct HistoryEntry: Hashable, Sendable {
    package let event: FiledEvent
    public let decision: Decision
    public let purged: Bool
    /// The projected object the event was filed under (class and id).
    public var objectClass: String { event.objectClass }
}

extension ReplayStore {
    /// Every event that touched `object` — a user (profile, relationships as
    /// target, coins), a device, a picture, a chat (with its messages), a
    /// message or any liked object — in merge order per object, each with
    /// its decision.
    public func history(of object: Bytes32) throws -> [HistoryEntry] {
        var filed = try projections.filedEvents(about: object)
        // A chat's history includes its messages and their edits.
        if filed.contains(where: { $0.objectClass == "chat" }) {
            for message in try projections.messageIDs(inChat: object) {
                filed += try projections.filedEvents(about: message).filter { $0.objectClass == "message" }
            }
        }
        // A user's history includes the binding and removal of its devices.
        for device in try projections.devices(of: object) {
            filed += try projections.filedEvents(about: device.device.raw).filter { $0.objectClass == "device" }
        }
        var seen: Set<String> = []
        filed = filed.filter { seen.insert($0.objectClass + $0.id.hex).inserted }
        filed.sort { ($0.order, $0.objectClass) < ($1.order, $1.objectClass) }
        var reasons: [String: NoEffect] = [:]
        for f in filed {
            if f.objectClass == "coins" {
                if let reason = try projections.ledgerEntry(f.order)?.noEffect { reasons[f.objectClass + f.id.hex] = reason }
            } else if let reason = try projections.noEffect(f.id) {
                reasons[f.objectClass + f.id.hex] = reason
            }
        }
        let superseded = Self.supersessions(filed.filter { reasons[$0.objectClass + $0.id.hex] == nil })
        return filed.map { f in
            let key = f.objectClass + f.id.hex
            let decision = reasons[key].map(Decision.noEffect) ?? superseded[key] ?? .applied
            return HistoryEntry(event: f, decision: decision, purged: f.payload == nil && f.kind.payloadIsPurgeable)
        }
    }

    /// Which effective events (the only ones passed in) a later one replaced: register writes by the
    /// next write of the same register, edits by a deletion, relationship
    /// adds by the removal that named them.
    static func supersessions(_ filed: [FiledEvent]) -> [String: Decision] {
        var out: [String: Decision] = [:]
        var lastWrite: [String: FiledEvent] = [:]
        var deletion: [String: FiledEvent] = [:]
        for f in filed {
            switch rule(of: f) {
            case .register(let register):
                if let previous = lastWrite[register] {
                    out[previous.objectClass + previous.id.hex] = .superseded(by: f.id, how: "overwritten")
                }
                lastWrite[register] = f
            case .deletion:
                deletion[f.object.hex] = deletion[f.object.hex] ?? f
            case .removal(let seen):
                for id in seen { out[f.objectClass + id.hex] = .superseded(by: f.id, how: "removed") }
            case .none:
                break
            }
        }
        // A deletion overrides every edit of its object, earlier or later.
        for f in filed where f.kind != .pictureDeleted && f.kind != .messageDeleted {
            if let d = deletion[f.object.hex], f.objectClass == "picture" || f.objectClass == "message" {
                out[f.objectClass + f.id.hex] = .superseded(by: d.id, how: "deleted")
            }
        }
        return out
    }

    /// How an event can replace earlier ones in the history.
    enum SupersessionRule {
        /// It writes a last-writer-wins register (named by the string): it replaces the register's previous write.
        case register(String)
        /// It deletes its object: it replaces every edit of it.
        case deletion
        /// It removes the adds it names from an add-wins set.
        case removal([EventID])
        /// It replaces nothing.
        case none
    }

    /// The rule of `f`'s kind, as the kind declares it
    /// (`EventKind.supersession`). A payload that is purged or does not
    /// read as its kind names no register part and no removed adds.
    static func rule(of f: FiledEvent) -> SupersessionRule {
        let object = f.object.hex
        // Read only where the rule needs it: a chat's history has a message per event.
        func payload() -> (any KindPayload)? { f.payload.flatMap { p in (try? f.kind.payloadType.map { try $0.init(reading: p) }) ?? nil } }
        switch f.kind.supersession {
        case .register(let name):
            guard f.kind.payloadType is any RegisterKeyed.Type else { return .register("\(name):\(object)") }
            return .register("\(name):\(object):\((payload() as? any RegisterKeyed)?.registerPart ?? "?")")
        case .deletion: return .deletion
        case .removal: return .removal((payload() as? any RemovalPayload)?.seen ?? [])
        case .none: return .none
        }
    }
}

/// What a member's device reads of a sealed value in the history.
package enum Decrypted: Hashable, Sendable {
    case plaintext(CBORValue)
    /// The device holds no key of the value's epoch.
    case locked(epoch: Hash32?)
    /// The key is held but the value does not open or decode.
    case unreadable
}

extension ReplayStore {
    /// Opens the sealed title or body an event carries (Specs/encryption.md
    /// §7) with the keys wrapped to `reader`'s device; nil when the event
    /// carries none. Nothing decrypted is written anywhere.
    package func decrypt(_ event: Event, with reader: EpochKeyFinder) throws -> Decrypted? {
        guard let field = SealedField(of: event) else { return nil }
        guard let epoch = ChatCrypto.epoch(ofSealed: field.sealed),
            let key = try reader.key(chat: field.chat, epoch: epoch, in: projections)
        else { return .locked(epoch: ChatCrypto.epoch(ofSealed: field.sealed)) }
        guard let plain = ChatCrypto.open(
                field.sealed, epochKey: key, kind: event.kind, chat: field.chat, object: field.object, author: event.author),
            let value = try? CBORDecoder.decode(plain)
        else { return .unreadable }
        return .plaintext(value)
    }
}
