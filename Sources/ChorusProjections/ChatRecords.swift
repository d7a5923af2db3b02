import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusStorage

/// A user's membership of one chat over time: half-open HLC intervals
/// `[from, to)`, `to` nil while the membership lasts.
package struct Membership: Hashable, Sendable {
    /// Whether the user is an administrator: set when they join (the creator as
    /// admin, initial members not) and by each later effective
    /// `chat.member.added` naming them. It counts only while the membership is
    /// current (Specs/projections.md §6.5).
    package var admin: Bool
    /// The membership intervals in the order they began: `from` inclusive, `to`
    /// exclusive, `to` nil for the interval still open.
    package var intervals: [(from: HLC, to: HLC?)]

    /// Whether the user is a member now: the last interval is still open.
    package var isCurrent: Bool { intervals.last.map { $0.to == nil } ?? false }

    /// Whether some interval holds `hlc` (`from ≤ hlc < to`, or an open `to`):
    /// the test that decides messages, read markers and key events
    /// (Specs/projections.md §6.5).
    package func isMember(at hlc: HLC) -> Bool {
        intervals.contains { $0.from <= hlc && ($0.to.map { hlc < $0 } ?? true) }
    }

    /// Equal when `admin` and every interval match (tuples are not `Equatable`,
    /// so this is written out).
    package static func == (a: Membership, b: Membership) -> Bool {
        a.admin == b.admin && a.intervals.count == b.intervals.count
            && zip(a.intervals, b.intervals).allSatisfy { $0.from == $1.from && $0.to == $1.to }
    }

    /// Hashes `admin` and every interval's bounds, consistently with `==`.
    package func hash(into h: inout Hasher) {
        h.combine(admin)
        for i in intervals {
            h.combine(i.from)
            h.combine(i.to)
        }
    }

    /// The span of time where `a` and `b` disagree on membership, from the
    /// first such moment to the end of the last (nil: still disagreeing
    /// now); nil when they agree at every moment (at most `admin` differs).
    /// Messages outside it are decided as before (Specs/projections.md §6.6).
    static func disagreement(_ a: Membership?, _ b: Membership?) -> (from: HLC, to: HLC?)? {
        // Membership changes only at the intervals' bounds: between two
        // consecutive bounds both are constant.
        var bounds: [HLC] = []
        for m in [a, b] { for i in m?.intervals ?? [] { bounds.append(i.from); if let to = i.to { bounds.append(to) } } }
        bounds = Array(Set(bounds)).sorted()
        var first: HLC? = nil
        var end: HLC?? = nil
        for (k, bound) in bounds.enumerated() where (a?.isMember(at: bound) ?? false) != (b?.isMember(at: bound) ?? false) {
            if first == nil { first = bound }
            end = .some(k + 1 < bounds.count ? bounds[k + 1] : nil)
        }
        guard let first, let end else { return nil }
        return (first, end)
    }

    func encoded() -> [UInt8] {
        Codec.cbor(
            .array([
                .bool(admin),
                .array(intervals.map { .array([.unsigned($0.from.rawValue), $0.to.map { .unsigned($0.rawValue) } ?? .null]) }),
            ]))
    }

    static func decode(_ raw: [UInt8]) throws -> Membership {
        // Read in place: a chat list reads every member of its page's chats,
        // and the folds read memberships for every message. Anything but
        // the canonical layout `encoded()` writes goes the long way.
        var intervals: [(from: HLC, to: HLC?)] = []
        if let admin = walkInPlace(raw, reserve: { intervals.reserveCapacity($0) }, { intervals.append((HLC(rawValue: $0), $1.map(HLC.init(rawValue:)))) }) {
            return Membership(admin: admin, intervals: intervals)
        }
        return try decodeWhole(raw)
    }

    /// The admin flag and the start of the open interval of a current
    /// membership; nil when the membership is not current. Keeps no
    /// intervals: a chat list reads every member of every chat it shows.
    static func current(_ raw: [UInt8]) throws -> (admin: Bool, since: HLC)? {
        var last: (from: UInt64, open: Bool)? = nil
        if let admin = walkInPlace(raw, reserve: { _ in }, { last = ($0, $1 == nil) }) {
            guard let last, last.open else { return nil }
            return (admin, HLC(rawValue: last.from))
        }
        let m = try decodeWhole(raw)
        guard m.isCurrent, let since = m.intervals.last?.from else { return nil }
        return (m.admin, since)
    }

    /// Reads the canonical layout `encoded()` writes in place: calls
    /// `reserve` with the number of intervals, then `interval` with each
    /// one's bounds, and returns the admin flag; nil for any other layout
    /// (the caller then decodes the long way).
    private static func walkInPlace(_ raw: [UInt8], reserve: (Int) -> Void, _ interval: (UInt64, UInt64?) -> Void) -> Bool? {
        var r = HeadReader(raw)
        guard r.head(major: 4) == 2, let flag = r.simple(), flag == 0xF4 || flag == 0xF5, let count = r.head(major: 4), count <= raw.count
        else { return nil }
        reserve(Int(count))
        for _ in 0..<count {
            guard r.head(major: 4) == 2, let from = r.head(major: 0) else { return nil }
            if r.peek == 0xF6 {
                _ = r.simple()
                interval(from, nil)
            } else if let to = r.head(major: 0) {
                interval(from, to)
            } else {
                return nil
            }
        }
        return r.atEnd ? flag == 0xF5 : nil
    }

    static func decodeWhole(_ raw: [UInt8]) throws -> Membership {
        let v = try Codec.decode(raw, "membership")
        guard let a = v.arrayValue, a.count == 2, let admin = a[0].boolValue, let list = a[1].arrayValue else {
            throw ProjectionError.corrupt("membership")
        }
        var intervals: [(HLC, HLC?)] = []
        for item in list {
            guard let pair = item.arrayValue, pair.count == 2, let from = pair[0].unsignedValue else {
                throw ProjectionError.corrupt("membership interval")
            }
            intervals.append((HLC(rawValue: from), pair[1].unsignedValue.map(HLC.init(rawValue:))))
        }
        return Membership(admin: admin, intervals: intervals)
    }
}

/// What a message's fold reads of its `message.sent` beyond the event's
/// order, chat and arrival: whether the log holds its payload, and the
/// blob of the picture it carries (`blob`, Specs/events.md §6.2.17).
struct SentContent: Sendable, Equatable {
    /// The blob of the message's picture; nil without one, or when purged.
    let attachment: Hash32?
    /// Whether the payload is held (false: purged).
    let held: Bool

    init(payload: CBORValue?) {
        attachment = payload.flatMap { try? MessageSentPayload(reading: $0) }?.blob
        held = payload != nil
    }

    init(attachment: Hash32?, held: Bool) {
        self.attachment = held ? attachment : nil
        self.held = held
    }
}

/// The `message` state record (Specs/projections.md §5), under the key
/// chat ‖ u64be(sending hlc) ‖ message id: what every replica holds of an
/// effective message. Its encoding and decoding are side by side here.
struct MessageRecord: Hashable, Sendable {
    /// The acting user of the `message.sent`.
    var sender: PublicKey
    /// The device that signed the `message.sent`.
    var device: PublicKey
    /// HLC of the `message.sent`.
    var hlc: HLC
    /// The sealed body: the winning edit's, else the original; nil when deleted or purged.
    var body: [UInt8]? = nil
    /// The encrypted picture's blob and its size; nil without one, or when deleted or purged.
    var blob: Hash32? = nil
    var size: UInt64? = nil
    /// HLC and device of the winning effective edit.
    var edited: HLC? = nil
    var editor: PublicKey? = nil
    /// HLC of the effective `message.deleted`; nil while live.
    var deleted: HLC? = nil
    /// Live, but the `message.sent` payload is purged here.
    var purged = false

    /// The canonical CBOR of the record's map (Specs/projections.md §5),
    /// written directly: every message of a fold and of a rebuild is
    /// encoded, and building a `CBORValue` tree first cost more than the
    /// encoding. The keys go in canonical order (shorter first, then
    /// bytewise), which a test checks against the generic encoder.
    func encoded() -> [UInt8] {
        let optional = [body != nil, blob != nil, size != nil, edited != nil, editor != nil, deleted != nil, purged]
        var w = RecordMapWriter(entries: 3 + optional.filter { $0 }.count, capacity: 160 + (body?.count ?? 0))
        w.key("hlc"); w.unsigned(hlc.rawValue)
        if let blob { w.key("blob"); w.bytes(blob) }
        if let body { w.key("body"); w.bytes(body) }
        if let size { w.key("size"); w.unsigned(size) }
        w.key("device"); w.bytes(device)
        if let edited { w.key("edited"); w.unsigned(edited.rawValue) }
        if let editor { w.key("editor"); w.bytes(editor) }
        if purged { w.key("purged"); w.true() }
        w.key("sender"); w.bytes(sender)
        if let deleted { w.key("deleted"); w.unsigned(deleted.rawValue) }
        return w.out
    }

    /// The content of a live message whose `message.sent` payload is
    /// `sent`: the sealed body (Specs/encryption.md §7), which the winning
    /// edit's sealed body replaces when this node holds the edit's payload;
    /// the encrypted picture's blob and size. The fold and the reading of a
    /// stored entry both decide it here, so they cannot differ.
    static func live(sender: PublicKey, device: PublicKey, hlc: HLC, sent: MessageSentPayload?, edit: (hlc: HLC, author: PublicKey, body: [UInt8]?)?)
        -> MessageRecord
    {
        var record = MessageRecord(sender: sender, device: device, hlc: hlc)
        record.body = edit?.body ?? sent?.body
        if let blob = sent?.blob, let size = sent?.size {
            record.blob = blob
            record.size = size
        }
        if let edit {
            record.edited = edit.hlc
            // The edit's device: its sealed body's associated data names it.
            record.editor = edit.author
        }
        return record
    }

    /// A `message.sent` payload's parts; nil when it is not one (the record
    /// then shows no body, as for any payload it cannot read).
    static func sentPayload(_ raw: [UInt8], at arrival: UInt64) throws -> MessageSentPayload? {
        if let canonical = MessageSentPayload.readCanonical(raw) { return canonical }
        let payload = try Codec.decode(raw, "payload of the message at arrival \(arrival)")
        return try? MessageSentPayload(reading: payload)
    }

    /// The sealed body of a `message.edited` payload; nil when it is not one.
    static func editedBody(_ raw: [UInt8], at arrival: UInt64) throws -> [UInt8]? {
        if let canonical = MessageEditedPayload.readCanonical(raw) { return canonical.body }
        let payload = try Codec.decode(raw, "payload of the edit at arrival \(arrival)")
        return (try? MessageEditedPayload(reading: payload))?.body
    }

    static func decode(_ raw: [UInt8]) throws -> MessageRecord {
        let v = try Codec.decode(raw, "message record")
        guard let sender = v[text: "sender"]?.id32, let device = v[text: "device"]?.id32, let hlc = v[text: "hlc"]?.unsignedValue
        else { throw ProjectionError.corrupt("message record") }
        var r = MessageRecord(sender: sender, device: device, hlc: HLC(rawValue: hlc))
        r.body = v[text: "body"]?.bytesValue
        r.blob = v[text: "blob"]?.id32
        r.size = v[text: "size"]?.unsignedValue
        r.edited = v[text: "edited"]?.unsignedValue.map(HLC.init(rawValue:))
        r.editor = v[text: "editor"]?.id32
        r.deleted = v[text: "deleted"]?.unsignedValue.map(HLC.init(rawValue:))
        r.purged = v[text: "purged"]?.boolValue ?? false
        return r
    }
}

/// How the `state` database holds a `message` record (Specs/projections.md
/// §9.1): the sender, the sending device and the arrival positions of the
/// `message.sent` and of the winning edit, whose payloads hold the sealed
/// content, instead of a copy of it. A chat's messages are most of a
/// store's events, and their bodies most of its bytes; the log already
/// holds them. `expand` gives the record of §5, which the digest, the
/// diffs and the queries read.
///
/// Layout: device (32) ‖ u64be(sent arrival) ‖ u8(flags: 1 edited,
/// 2 deleted, 4 purged) ‖ if edited: u64be(edit arrival) ‖ u64be(edit
/// hlc) ‖ editor (32) ‖ if deleted: u64be(deleted hlc). A withdrawn entry
/// is device (32) ‖ u64be(sent arrival) ‖ u8(8) ‖ the send's no-effect
/// record (the value its `noEffect` entry would hold, which it stands in
/// for). The sender, the device's user, is not stored: it is read from
/// the device's binding (`Senders`, §9.1). Arrival positions
/// are local to a store, so two replicas' entries differ where their
/// records do not.
struct MessageEntry: Sendable {
    var device: PublicKey
    /// Arrival position of the `message.sent`.
    var sent: UInt64
    /// The winning effective edit: where the log holds it, its HLC and device.
    var edit: (arrival: UInt64, hlc: HLC, author: PublicKey)? = nil
    /// HLC of the effective `message.deleted`; nil while live.
    var deleted: HLC? = nil
    /// Live, but the `message.sent` payload is purged here.
    var purged = false
    /// The send takes no effect: the entry only names the send, for
    /// listing a chat's messages, and is no part of the state of
    /// Specs/projections.md §5.
    var withdrawn = false
    /// Why a withdrawn send takes no effect: its `noEffect` record of §5,
    /// kept here instead of under its own key (§9.1).
    var reason: NoEffect? = nil

    /// The entry of an effective message.
    init(device: PublicKey, sent: UInt64) {
        self.device = device
        self.sent = sent
    }

    /// The entry of a send that takes no effect, for `reason`.
    init(withdrawnBy device: PublicKey, sent: UInt64, reason: NoEffect) {
        self.init(device: device, sent: sent)
        withdrawn = true
        self.reason = reason
    }

    static let withdrawnFlag: UInt8 = 8
    /// Bytes before the optional fields: device, sent arrival, flags.
    static let baseLength = 41

    /// Whether a stored entry is withdrawn, without decoding it whole.
    static func isWithdrawn(_ raw: [UInt8]) throws -> Bool {
        guard raw.count >= baseLength else { throw ProjectionError.corrupt("message entry of \(raw.count) bytes") }
        return raw[40] & withdrawnFlag != 0
    }

    /// Whether a stored entry is an effective message that was deleted,
    /// without decoding it whole.
    static func isDeleted(_ raw: [UInt8]) throws -> Bool {
        guard raw.count >= baseLength else { throw ProjectionError.corrupt("message entry of \(raw.count) bytes") }
        return raw[40] & withdrawnFlag == 0 && raw[40] & 2 != 0
    }

    /// Whether a stored entry is live with its `message.sent` payload
    /// purged, without decoding it whole.
    static func isPurged(_ raw: UnsafeRawBufferPointer) throws -> Bool {
        guard raw.count >= baseLength else { throw ProjectionError.corrupt("message entry of \(raw.count) bytes") }
        return raw[40] & withdrawnFlag == 0 && raw[40] & 4 != 0
    }

    /// The device that signed the send and its arrival position, read from
    /// a stored entry of either kind.
    static func send(of raw: [UInt8]) throws -> (device: PublicKey, arrival: UInt64) {
        guard raw.count >= baseLength else { throw ProjectionError.corrupt("message entry of \(raw.count) bytes") }
        return (try Codec.b32(raw[0..<32], "device"), Codec.readU64(raw[32..<40]))
    }

    func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(Self.baseLength + (edit == nil ? 0 : 48) + (deleted == nil ? 0 : 8))
        out += device.bytes
        out += Codec.u64(sent)
        if withdrawn {
            out.append(Self.withdrawnFlag)
            if let reason { out += Projections.encodeNoEffect(reason) }
            return out
        }
        out.append((edit == nil ? 0 : 1) | (deleted == nil ? 0 : 2) | (purged ? 4 : 0))
        if let edit { out += Codec.u64(edit.arrival) + Codec.u64(edit.hlc.rawValue) + edit.author.bytes }
        if let deleted { out += Codec.u64(deleted.rawValue) }
        return out
    }

    static func decode(_ raw: [UInt8]) throws -> MessageEntry {
        guard raw.count >= baseLength, raw[40] & ~15 == 0 else { throw ProjectionError.corrupt("message entry of \(raw.count) bytes") }
        let flags = raw[40]
        let device = try Codec.b32(raw[0..<32], "device")
        let sent = Codec.readU64(raw[32..<40])
        if flags & withdrawnFlag != 0 {
            // A withdrawn entry names its send, and why it takes no effect.
            guard flags == withdrawnFlag, raw.count > baseLength else {
                throw ProjectionError.corrupt("withdrawn message entry of \(raw.count) bytes, flags \(flags)")
            }
            return MessageEntry(withdrawnBy: device, sent: sent, reason: try Projections.decodeNoEffect(Array(raw[baseLength...])))
        }
        let length = baseLength + (flags & 1 == 0 ? 0 : 48) + (flags & 2 == 0 ? 0 : 8)
        guard raw.count == length else { throw ProjectionError.corrupt("message entry of \(raw.count) bytes, flags \(flags)") }
        var entry = MessageEntry(device: device, sent: sent)
        entry.purged = flags & 4 != 0
        var at = baseLength
        if flags & 1 != 0 {
            entry.edit = (Codec.readU64(raw[at..<at + 8]), HLC(rawValue: Codec.readU64(raw[at + 8..<at + 16])), try Codec.b32(raw[at + 16..<at + 48], "editor"))
            at += 48
        }
        if flags & 2 != 0 { entry.deleted = HLC(rawValue: Codec.readU64(raw[at..<at + 8])) }
        return entry
    }

    /// The record of Specs/projections.md §5, with the content read from the
    /// payloads the entry names. `hlc` is the sending HLC, from the key;
    /// `senders` gives the device's user.
    func expand(hlc: HLC, senders: inout Senders, log: LogStore, in txn: Transaction) throws -> MessageRecord {
        try record(hlc: hlc, sender: try senders.user(of: device, in: txn), payloads: try payloads(log: log, in: txn))
    }

    /// The payload bytes `record` reads: the send's and the edit's, none
    /// for a deleted or purged message. Reading needs the transaction;
    /// decoding them (`record`) does not, so a scan can decode on all cores.
    func payloads(log: LogStore, in txn: Transaction) throws -> (sent: [UInt8], edit: [UInt8]?)? {
        guard deleted == nil, !purged else { return nil }
        guard let sentBytes = try log.readPayload(at: sent, in: txn) else {
            throw ProjectionError.corrupt("live message record names the purged event at arrival \(sent)")
        }
        return (sentBytes, try edit.flatMap { try log.readPayload(at: $0.arrival, in: txn) })
    }

    /// The record of §5 from the payloads `payloads` read, sent by `sender`.
    func record(hlc: HLC, sender: PublicKey, payloads: (sent: [UInt8], edit: [UInt8]?)?) throws -> MessageRecord {
        var record = MessageRecord(sender: sender, device: device, hlc: hlc)
        if let deleted {
            record.deleted = deleted
            return record
        }
        guard let payloads else {
            record.purged = true
            return record
        }
        let parts = try MessageRecord.sentPayload(payloads.sent, at: sent)
        var edited: (hlc: HLC, author: PublicKey, body: [UInt8]?)? = nil
        if let edit {
            edited = (edit.hlc, edit.author, try payloads.edit.flatMap { try MessageRecord.editedBody($0, at: edit.arrival) })
        }
        return MessageRecord.live(sender: sender, device: device, hlc: hlc, sent: parts, edit: edited)
    }
}

/// The users that devices send messages for, read from their bindings
/// (Specs/projections.md §9.1) and kept for one read of the state: a
/// `message` entry stores the device, not its user. The fold re-folds a
/// device's events whenever its binding changes, so an entry that takes
/// effect was decided for the user this gives: the binding's user, or the
/// key itself when it is bound to none (a user key, an unbound device).
struct Senders {
    let state: Database
    private var users: [PublicKey: PublicKey] = [:]

    init(state: Database) { self.state = state }

    mutating func user(of device: PublicKey, in txn: Transaction) throws -> PublicKey {
        if let user = users[device] { return user }
        let user = try txn.get(state, Table.device.key(device)).map(DeviceBinding.user(of:)) ?? device
        users[device] = user
        return user
    }
}

/// A chat's `chat` state record (Specs/projections.md §5): its creation.
struct ChatRecord: Equatable {
    let creator: PublicKey
    let hlc: HLC
    let createdBy: EventID
    /// Sealed (Specs/encryption.md §7): every replica keeps the same ciphertext.
    let title: [UInt8]?

    /// The canonical CBOR map, keys in canonical order (shorter first).
    func encoded() -> [UInt8] {
        var w = RecordMapWriter(entries: title == nil ? 3 : 4, capacity: 100 + (title?.count ?? 0))
        w.key("hlc")
        w.unsigned(hlc.rawValue)
        if let title {
            w.key("title")
            w.bytes(title)
        }
        w.key("creator")
        w.bytes(creator)
        w.key("created_by")
        w.bytes(createdBy)
        return w.out
    }

    /// Read in place: a chat list reads the record of every chat on its
    /// page. Anything but the layout `encoded()` writes goes the long way.
    static func decode(_ raw: [UInt8]) throws -> ChatRecord {
        var r = HeadReader(raw)
        if let entries = r.head(major: 5), entries == 3 || entries == 4, r.text("hlc"), let hlc = r.head(major: 0) {
            var title: [UInt8]? = nil
            var fine = true
            if entries == 4 {
                if r.text("title"), let t = r.byteString() { title = t } else { fine = false }
            }
            if fine, r.text("creator"), let creator = r.bytes32(), r.text("created_by"), let by = r.bytes32(), r.atEnd
            {
                return ChatRecord(creator: creator, hlc: HLC(rawValue: hlc), createdBy: by, title: title)
            }
        }
        return try decodeWhole(raw)
    }

    static func decodeWhole(_ raw: [UInt8]) throws -> ChatRecord {
        let v = try Codec.decode(raw, "chat record")
        guard let creator = v[text: "creator"]?.id32, let hlc = v[text: "hlc"]?.unsignedValue, let by = v[text: "created_by"]?.id32
        else { throw ProjectionError.corrupt("chat record") }
        return ChatRecord(creator: creator, hlc: HLC(rawValue: hlc), createdBy: by, title: v[text: "title"]?.bytesValue)
    }
}
