import ChorusCBOR
import ChorusCrypto
import ChorusEncryption
import ChorusEvents
import ChorusProjections
import Foundation
import Synchronization

/// The epoch keys this device has unwrapped, kept in memory only: plaintext
/// keys are never written to the store, the log or anything synced
/// (Specs/encryption.md §6, §8).
final class KeyRing: Sendable {
    struct Slot: Hashable {
        let chat: ObjectID
        let epoch: Hash32
    }
    /// This device's X25519 key; nil for a store without one (read-only
    /// view of a store from before encryption).
    let agreement: AgreementKey?
    private let keys = Mutex<[Slot: [UInt8]]>([:])

    init(agreement: AgreementKey?) { self.agreement = agreement }

    func get(_ chat: ObjectID, _ epoch: Hash32) -> [UInt8]? { keys.withLock { $0[Slot(chat: chat, epoch: epoch)] } }
    func put(_ chat: ObjectID, _ epoch: Hash32, _ key: [UInt8]) { keys.withLock { $0[Slot(chat: chat, epoch: epoch)] = key } }
}

/// Sealed values this device has opened, by the event that sealed them,
/// so an inbox or chat screen that re-reads the same rows after each commit
/// decrypts only what changed. An event's id fixes its payload, hence the
/// sealed bytes and everything their opening reads (the associated data
/// names the event's kind, chat, object and author): a kept value is the
/// value opening would give. Only opened content is kept: a value that is
/// locked or unreadable may open once a key arrives. A deleted message's
/// values go with the commit that stores its deletion, as its sealed bytes
/// go from the log (Specs/projections.md §6.6): `forget(messages:)`, which
/// also refuses them from a read that opened them on a snapshot from before.
/// Bounded by two generations of `capacity` entries each (a lookup in the
/// older one brings the entry back), and emptied when the node closes.
package final class OpenedContent: Sendable {
    /// The event whose sealed value was opened.
    package enum Input: Hashable {
        /// A chat's title, sealed in its creation.
        case title(chat: ObjectID, creation: EventID)
        /// A message's body as sent, in the `message.sent` with this id.
        case sent(EventID)
        /// A message's body as edited: the edit its sending device stamped
        /// with this HLC (a feed's HLCs increase, so one event).
        case edit(EventID, hlc: HLC, editor: PublicKey)
    }
    private struct Generations {
        var current: [Input: any Sendable]
        var previous: [Input: any Sendable] = [:]
        /// Deleted messages, whose values are not kept again: a read on a
        /// snapshot from before the deletion may still open one after
        /// `forget`. Two generations of `capacity` too; a read that old is
        /// long over before its message ages out of them.
        var forgotten: Set<EventID> = []
        var forgottenBefore: Set<EventID> = []

        init(capacity: Int) { current = Dictionary(minimumCapacity: capacity) }

        func isForgotten(_ input: Input) -> Bool {
            switch input {
            case .title: false
            case .sent(let message), .edit(let message, _, _): forgotten.contains(message) || forgottenBefore.contains(message)
            }
        }
    }
    private let generations: Mutex<Generations>
    let capacity: Int
    /// Values decrypted because they were not kept (for the tests and the benchmarks).
    package let openings = Atomic<Int>(0)

    package init(capacity: Int = 1024) {
        self.capacity = capacity
        generations = Mutex(Generations(capacity: capacity))
    }

    package func get(_ input: Input) -> (any Sendable)? {
        generations.withLock { g in
            if let value = g.current[input] { return value }
            guard let value = g.previous.removeValue(forKey: input) else { return nil }
            Self.put(input, value, in: &g, capacity: capacity)
            return value
        }
    }

    package func put(_ input: Input, _ value: any Sendable) {
        generations.withLock { Self.put(input, value, in: &$0, capacity: capacity) }
    }

    /// Drops every value of these messages (as sent and as edited) and
    /// keeps none of them again: they were deleted.
    package func forget(messages: some Collection<EventID>) {
        guard !messages.isEmpty else { return }
        generations.withLock { g in
            for message in messages {
                if g.forgotten.count >= capacity {
                    g.forgottenBefore = g.forgotten
                    g.forgotten = []
                }
                g.forgotten.insert(message)
            }
            g.current = g.current.filter { !g.isForgotten($0.key) }
            g.previous = g.previous.filter { !g.isForgotten($0.key) }
        }
    }

    private static func put(_ input: Input, _ value: any Sendable, in g: inout Generations, capacity: Int) {
        guard !g.isForgotten(input) else { return }
        if g.current.count >= capacity {
            g.previous = g.current
            g.current = Dictionary(minimumCapacity: capacity)
        }
        g.current[input] = value
    }

    /// Forgets every opened value (on close; the benchmarks, to time a first read).
    package func removeAll() { generations.withLock { [capacity] in $0 = Generations(capacity: capacity) } }
}

/// What a member's device can show of a sealed value (Specs/encryption.md §8).
public enum Readable<Content: Hashable & Sendable>: Hashable, Sendable {
    /// The value, opened with a key this device holds.
    case content(Content)
    /// This device holds no key of the value's epoch.
    case locked(epoch: Hash32?)
    /// The value does not open with the key, or its plaintext is malformed.
    case unreadable
    /// This node has no encryption key at all.
    case sealed

    /// The opened content, or `nil` for `locked`, `unreadable` and `sealed`.
    public var value: Content? { if case .content(let c) = self { c } else { nil } }
}

/// Opened content is kept as it was opened, so a cached view needs no key to read back.
extension Readable: Codable where Content: Codable {}

/// A message as this device reads it: the projected record and, when this
/// device holds its epoch key, the content.
public struct ReadableMessage: Hashable, Sendable, Codable {
    /// The message's projected record: sender, device, HLC, the sealed body and
    /// its edit or deletion state.
    public let view: MessageView
    /// The message's content as this device can open it; an edited message shows
    /// the winning edit's text with the picture and attachment it was first sent with.
    public let content: Readable<MessageContent>
    /// The picture the content refers to, resolved now (Specs/projections.md §7.1).
    public let picture: PictureReference?
}

/// A chat as this device reads it: the projected record and, when this device
/// holds the key, the opened title (Specs/encryption.md §8).
public struct ReadableChat: Hashable, Sendable, Codable {
    /// The chat's projected record: creator, current members and message count.
    public let view: ChatView
    /// The title as this device can open it, or `nil` when the chat has no title.
    public let title: Readable<String>?
}

/// One page of a chat as this device reads it, returned by
/// ``Node/readableChatPage(_:limit:before:)``.
public struct ReadableChatPage: Hashable, Sendable, Codable {
    /// The chat itself, with its title opened when it can be.
    public let chat: ReadableChat
    /// The page's messages, oldest first, leaving out senders the viewing user blocks.
    public let messages: [ReadableMessage]
    /// The cursor to pass as `before` for the next, older page; `nil` when this
    /// page reaches the chat's first message.
    public let older: MessageCursor?
    /// Each member's read marker: the furthest message they marked read.
    public let readMarkers: [UserID: ReadMarker]

    /// The users who have read `message` (their read marker covers it), its
    /// sender left out, in key order.
    public func readers(of message: ReadableMessage) -> [UserID] {
        ReadMarker.readers(of: message.view, among: readMarkers)
    }
}

/// One row of this user's chat list (``Node/chatList()``): the chat with
/// its title opened, its last message opened, and this user's unread count.
public struct ReadableChatSummary: Hashable, Sendable, Codable {
    /// The chat, with its title opened when this device holds the key.
    public let chat: ReadableChat
    /// The newest message, opened when this device holds its epoch key;
    /// nil in a chat without messages.
    public let lastMessage: ReadableMessage?
    /// Messages after this user's read marker that others sent and that
    /// are not deleted, counted up to `ChatSummary.unreadLimit` (that value
    /// means at least as many).
    public let unread: Int
    /// This user's read marker; nil before they marked anything read.
    public let readMarker: ReadMarker?
    /// When the chat last saw a message (or was created): the list's order,
    /// newest first. `lastActivity.date` gives it as a `Date`.
    public let lastActivity: HLC

    /// Where a page that ends with this row ends: pass it as `after` for
    /// the next page.
    public var cursor: ChatListCursor { ChatListCursor(lastActivity: lastActivity, chat: chat.view.id) }
}

// MARK: Reading: opening sealed values on this device

extension Node {
    /// The key of an epoch, if this device holds a wrap of it that opens.
    package nonisolated func epochKey(chat: ObjectID, epoch: Hash32) throws -> [UInt8]? {
        if let cached = keyRing.get(chat, epoch) { return cached }
        guard let agreement = keyRing.agreement,
            let key = try EpochKeyFinder(device: identity.device.raw, agreement: agreement).key(chat: chat, epoch: epoch, in: projections)
        else { return nil }
        keyRing.put(chat, epoch, key)
        return key
    }

    nonisolated func open<T: Sendable>(
        _ sealed: [UInt8], kind: EventKind, chat: ObjectID, object: ObjectID, author: PublicKey, kept input: OpenedContent.Input,
        _ decode: ([UInt8]) -> T?
    ) throws -> Readable<T> {
        guard keyRing.agreement != nil else { return .sealed }
        let epoch = ChatCrypto.epoch(ofSealed: sealed)
        guard let epoch else { return .locked(epoch: nil) }
        // Kept means opened here before with the epoch's key, which a device
        // keeps (what a removed member received stays readable): no key
        // lookup on a screen's redraw.
        if let kept = openedContent.get(input) as? T { return .content(kept) }
        guard let key = try epochKey(chat: chat, epoch: epoch) else { return .locked(epoch: epoch) }
        openedContent.openings.add(1, ordering: .relaxed)
        guard let plain = ChatCrypto.open(sealed, epochKey: key, kind: kind, chat: chat, object: object, author: author),
            let value = decode(plain)
        else { return .unreadable }
        openedContent.put(input, value)
        return .content(value)
    }

    /// A chat as this device reads it: the title opened when it can be.
    public nonisolated func readableChat(_ view: ChatView) throws -> ReadableChat {
        try readableChat(view, creatorDevice: nil)
    }

    /// `readableChat(_:)`, given the creating device when the caller read it.
    nonisolated func readableChat(_ view: ChatView, creatorDevice known: PublicKey?) throws -> ReadableChat {
        let title = try view.sealedTitle.map {
            try open(
                $0, kind: .chatCreated, chat: view.id.raw, object: view.id.raw, author: known ?? creatorDevice(of: view),
                kept: .title(chat: view.id.raw, creation: view.createdBy), TitleContent.decode)
        }
        return ReadableChat(view: view, title: title)
    }

    /// The device that signed a chat's creation (its title's author): kept
    /// in the chat's row (Specs/projections.md §9.1), so a chat list does
    /// not read every chat's creation from the log.
    nonisolated func creatorDevice(of view: ChatView) throws -> PublicKey {
        try projections.creatorDevice(of: view.id) ?? log.event(view.createdBy)?.event.author ?? view.creator.raw
    }

    /// A message as this device reads it.
    public nonisolated func readableMessage(_ m: MessageView) throws -> ReadableMessage {
        guard let body = m.body else { return ReadableMessage(view: m, content: .unreadable, picture: nil) }
        let content: Readable<MessageContent>
        if let edited = m.edited, let editor = m.editor {
            // The edit's body names the message as its object.
            content = try open(
                body, kind: .messageEdited, chat: m.chat.raw, object: m.id.raw, author: editor.raw, kept: .edit(m.id.raw, hlc: edited, editor: editor.raw)
            ) { MessageContent.decode($0, edit: true) }
        } else {
            content = try open(body, kind: .messageSent, chat: m.chat.raw, object: m.chat.raw, author: m.device.raw, kept: .sent(m.id.raw)) {
                MessageContent.decode($0)
            }
        }
        var picture: PictureReference? = nil
        if case .content(var c) = content {
            picture = try c.picture.map { try projections.reference(to: PictureID($0)) }
            if m.edited != nil, let original = try originalContent(m) {
                // An edit replaces the text; the picture and attachment stay.
                c.picture = original.picture
                c.attachment = original.attachment
                picture = try c.picture.map { try projections.reference(to: PictureID($0)) }
                return ReadableMessage(view: m, content: .content(c), picture: picture)
            }
        }
        return ReadableMessage(view: m, content: content, picture: picture)
    }

    /// The content of a message as first sent (before its edits).
    nonisolated func originalContent(_ m: MessageView) throws -> MessageContent? {
        // Kept, it needs no read of the body either.
        if let kept = openedContent.get(.sent(m.id.raw)) as? MessageContent { return kept }
        guard let body = try projections.sentBody(of: m) else { return nil }
        return try open(body, kind: .messageSent, chat: m.chat.raw, object: m.chat.raw, author: m.device.raw, kept: .sent(m.id.raw)) {
            MessageContent.decode($0)
        }.value
    }

    /// A page of a chat as this device reads it (Specs/encryption.md §8).
    public nonisolated func readableChatPage(_ chat: ChatID, limit: Int = 50, before: MessageCursor? = nil) throws -> ReadableChatPage {
        // One snapshot: the page, its senders' keys, the edits' originals and the pictures referenced.
        try read {
            let page = try projections.chat(chat, viewer: identity.user, limit: limit, before: before)
            return ReadableChatPage(
                chat: try readableChat(page.chat), messages: try page.messages.map(readableMessage), older: page.older,
                readMarkers: page.readMarkers)
        }
    }

    /// This user's chats as a chat list shows them, newest activity first:
    /// titles and last messages opened on this device, unread counts and
    /// read markers. Observe it to keep an inbox screen current:
    /// `node.observe { try $0.chatList() }` re-runs only when a commit touches
    /// one of these chats or this user's membership.
    ///
    /// With `limit`, a page: up to `limit` rows after `after` (the last
    /// row's `cursor` of the page before), in the same order. Only the
    /// page's rows are read whole and opened, so an inbox screen that shows
    /// its first rows pays for those rows, whatever the number of chats.
    public nonisolated func chatList(limit: Int? = nil, after: ChatListCursor? = nil) throws -> [ReadableChatSummary] {
        try read {
            try projections.chatList(of: identity.user, limit: limit, after: after).map { summary in
                ReadableChatSummary(
                    chat: try readableChat(summary.chat, creatorDevice: summary.creatorDevice), lastMessage: try summary.lastMessage.map(readableMessage), unread: summary.unread,
                    readMarker: summary.readMarker, lastActivity: summary.lastActivity)
            }
        }
    }

    /// The bytes of a picture sent in a chat, decrypted on this device.
    /// Reading and decrypting take milliseconds for a photo, so they run
    /// off the caller's thread (which in a SwiftUI view is the main thread).
    package nonisolated func attachmentBytes(of message: MessageID) async throws -> (bytes: [UInt8], attachment: Attachment)? {
        try await offTheCaller { try self.readAttachment(of: message) }
    }

    nonisolated func readAttachment(of message: MessageID) throws -> (bytes: [UInt8], attachment: Attachment)? {
        countMainThreadByteRead()
        guard let view = try projections.message(message), let blob = view.blob,
            let attachment = try readableMessage(view).content.value?.attachment,
            let sealed = try blobs.read(blob)
        else { return nil }
        guard let bytes = ChatCrypto.decryptAttachment(sealed, key: attachment.key) else { return nil }
        return (bytes, attachment)
    }
}

// MARK: Writing: epochs, rotation and sharing (Specs/encryption.md §6)

extension Node {
    /// The current devices of the chat's current members with their
    /// published encryption keys.
    nonisolated func currentMemberDevices(_ chat: ObjectID) throws -> [ChatCrypto.Recipient] {
        guard let view = try projections.chatView(chat) else { return [] }
        return try view.members.flatMap { try currentDevices(of: $0.user.raw) }
    }

    /// A user's devices that are bound, not removed, and have published an
    /// encryption key (Specs/encryption.md §3).
    nonisolated func currentDevices(of user: PublicKey) throws -> [ChatCrypto.Recipient] {
        try projections.devices(of: user).filter { $0.removedHLC == nil }.compactMap { d in
            try projections.encryptionKey(of: d.device.raw).map { ChatCrypto.Recipient(device: d.device.raw, encryptionKey: $0.key) }
        }
    }

    /// The epoch to seal under: the latest this device holds that no
    /// removed member or device holds and that started after every removal
    /// this node knows of; rotates first when there is none
    /// (Specs/encryption.md §6).
    func sendingEpoch(_ chat: ObjectID) async throws -> (epoch: Hash32, key: [UInt8]) {
        let current = Set(try currentMemberDevices(chat).map(\.device))
        let lastRemoval = try latestRemoval(in: chat)
        for e in try projections.epochs(of: chat).reversed() {
            // An older epoch may still reach a removed device through a
            // concurrent share by a device that had not seen the removal.
            if let lastRemoval, e.start <= lastRemoval { break }
            guard let key = try epochKey(chat: chat, epoch: e.epoch) else { continue }
            if try projections.possibleHolders(of: chat, epoch: e.epoch).isSubset(of: current) { return (e.epoch, key) }
        }
        return try await rotate(chat)
    }

    /// The HLC of the latest removal of a member, or of a member's device,
    /// that this node knows of.
    nonisolated func latestRemoval(in chat: ObjectID) throws -> HLC? {
        var latest: HLC? = nil
        for (user, membership) in try projections.memberships(in: chat) {
            for end in membership.intervals.compactMap(\.to) { latest = max(latest ?? end, end) }
            for d in try projections.devices(of: user) {
                if let removed = d.removedHLC { latest = max(latest ?? removed, removed) }
            }
        }
        return latest
    }

    /// Starts a new epoch wrapped to every current member device.
    @discardableResult
    func rotate(_ chat: ObjectID, recipients: [ChatCrypto.Recipient]? = nil) async throws -> (epoch: Hash32, key: [UInt8]) {
        let key = Random.bytes(32)
        let epoch = ChatCrypto.epochID(chat: chat, key: key)
        try await shareEpoch(chat, epoch: epoch, key: key, to: recipients ?? currentMemberDevices(chat))
        keyRing.put(chat, epoch, key)
        return (epoch, key)
    }

    /// Writes `chat.key` events carrying an epoch key wrapped to `recipients`
    /// (at most `PayloadLimits.maxWraps` per event).
    func shareEpoch(_ chat: ObjectID, epoch: Hash32, key: [UInt8], to recipients: [ChatCrypto.Recipient]) async throws {
        let unique = Array(Set(recipients)).sorted { $0.device < $1.device }
        var start = 0
        while start < unique.count {
            let part = Array(unique[start..<min(unique.count, start + PayloadLimits.maxWraps)])
            start += part.count
            let ephemeral = AgreementKey.generate()
            guard let wraps = ChatCrypto.wrap(epochKey: key, chat: chat, epoch: epoch, to: part, ephemeral: ephemeral) else {
                throw NodeError.refused(.unusableMemberKey)
            }
            try await append(ChatKeyPayload(epoch: epoch, wraps: wraps, ephemeral: ephemeral.publicKey), object: chat)
        }
    }

    /// Seals a value for an event of this device in `chat`.
    func seal(_ plaintext: [UInt8], in chat: ObjectID, kind: EventKind, object: ObjectID) async throws -> [UInt8] {
        let (epoch, key) = try await sendingEpoch(chat)
        return ChatCrypto.seal(
            plaintext, epochKey: key, epoch: epoch, kind: kind, chat: chat, object: object,
            author: identity.device.raw)
    }

    /// Shares every epoch key this device holds with the member devices
    /// entitled to it that lack it (Specs/encryption.md §6 rule 5): a new
    /// device of a member gets the history, a member whose devices were not
    /// known when they were added gets the epoch current at their joining.
    /// Returns the number of key events written.
    ///
    /// With `concerning`, only the chats the received events can change
    /// entitlements in are looked at: a chat named by a chat event, and the
    /// chats of a user whose binding or device key arrived, whole; a chat
    /// that only received messages, for the epochs of those messages only
    /// (a message is the one entitlement they can add: its epoch, to the
    /// members it was sent after; every other one changes only with the
    /// events above). A sync then pays for the chats and epochs it touched,
    /// not for every chat's history.
    @discardableResult
    package func shareChatKeys(concerning triggers: ChatKeyTriggers? = nil) async throws -> Int {
        guard !isReadOnly, keyRing.agreement != nil else { return 0 }
        if let triggers, triggers.isEmpty { return 0 }
        var written = 0
        let users = try triggers.map { t in Set(try t.keys.map { try projections.user(of: $0) }) } ?? []
        for chat in try projections.chats(of: identity.user) {
            let received = triggers?.messages[chat.id.raw] ?? []
            // Reading each received message costs about what a page of the
            // history costs a message: when they are a good part of it, it is
            // read whole.
            let whole =
                triggers.map { t in
                    t.chats.contains(chat.id.raw) || chat.members.contains { users.contains($0.user.raw) } || received.count * 8 >= chat.messageCount
                } ?? true
            guard whole || !received.isEmpty else { continue }
            let introduced = try projections.epochs(of: chat.id.raw)
            // Epochs that effective messages name: one whose introduction
            // took no effect (a rotation by a member removed and re-added
            // concurrently) is still shared, so its messages stay readable.
            let lastMessage = whole ? try latestMessagePerEpoch(in: chat.id.raw) : try latestMessagePerEpoch(of: received)
            let introducedSet = Set(introduced.map(\.epoch))
            let epochs: [(epoch: Hash32, start: HLC?)] =
                introduced.filter { whole || lastMessage[$0.epoch] != nil }.map { ($0.epoch, $0.start) }
                + lastMessage.keys.filter { !introducedSet.contains($0) }.sorted().map { ($0, nil) }
            guard !epochs.isEmpty else { continue }
            var lacking: [Hash32: [ChatCrypto.Recipient]] = [:]
            for member in chat.members {
                guard let join = try projections.membership(of: member.user.raw, in: chat.id.raw)?.intervals.last?.from else { continue }
                let devices = try currentDevices(of: member.user.raw)
                let latestBefore = introduced.last { $0.start < join }?.epoch
                for e in epochs {
                    let holders = Set(try projections.wraps(of: chat.id.raw, epoch: e.epoch).map(\.device))
                    let missing = devices.filter { !holders.contains($0.device) }
                    guard !missing.isEmpty, try epochKey(chat: chat.id.raw, epoch: e.epoch) != nil else { continue }
                    let userHolds = try projections.devices(of: member.user.raw).contains { holders.contains($0.device.raw) }
                    let startedAfterJoin = e.start.map { $0 >= join } ?? false
                    let messageAfterJoin = lastMessage[e.epoch].map { $0 >= join } ?? false
                    if userHolds || startedAfterJoin || e.epoch == latestBefore || messageAfterJoin {
                        lacking[e.epoch, default: []] += missing
                    }
                }
            }
            for (epoch, recipients) in lacking.sorted(by: { $0.key < $1.key }) {
                guard let key = try epochKey(chat: chat.id.raw, epoch: epoch) else { continue }
                try await shareEpoch(chat.id.raw, epoch: epoch, key: key, to: recipients)
                written += 1
            }
        }
        return written
    }

    /// `latestMessagePerEpoch(in:)` over the messages `ids` only (those that took effect).
    nonisolated func latestMessagePerEpoch(of ids: [EventID]) throws -> [Hash32: HLC] {
        var out: [Hash32: HLC] = [:]
        for id in ids {
            if let m = try projections.message(id), let e = m.epoch { out[e] = max(out[e] ?? m.hlc, m.hlc) }
        }
        return out
    }

    /// For each epoch that effective messages of the chat are sealed under,
    /// the HLC of the latest such message.
    nonisolated func latestMessagePerEpoch(in chat: ObjectID) throws -> [Hash32: HLC] {
        var out: [Hash32: HLC] = [:]
        var before: MessageCursor? = nil
        while true {
            let page = try projections.chat(chat, limit: 500, before: before)
            for m in page.messages { if let e = m.epoch { out[e] = max(out[e] ?? m.hlc, m.hlc) } }
            guard let older = page.older else { break }
            before = older
        }
        return out
    }

    /// Publishes this device's encryption key unless the store holds it
    /// already (Specs/encryption.md §3).
    func publishEncryptionKeyIfNeeded() async throws {
        guard !isReadOnly, let agreement = keyRing.agreement,
            try projections.encryptionKey(of: identity.device.raw) == nil
        else { return }
        try await append(DeviceKeyPayload(key: agreement.publicKey), object: identity.device.raw)
    }
}

/// What received events can change in chat key entitlements (Specs/
/// encryption.md §6 rule 5): the chats named by chat events, and the keys
/// (user keys, devices) whose bindings or device keys arrived.
package struct ChatKeyTriggers: Sendable, Hashable {
    /// Chats named by received `chat.created`, membership or `chat.key` events: looked at whole.
    package var chats: Set<ObjectID> = []
    /// Received `message.sent` events, by chat: a chat not in `chats` is
    /// looked at for their epochs only.
    package var messages: [ObjectID: [EventID]] = [:]
    /// Received messages listed per chat; past this many the chat is looked at whole.
    package static let messagesPerChat = 4096
    /// Authors of received bindings (user keys) and device keys (devices).
    package var keys: Set<PublicKey> = []

    /// No trigger yet.
    package init() {}

    /// Nothing received that could change an entitlement.
    package var isEmpty: Bool { chats.isEmpty && keys.isEmpty && messages.isEmpty }

    /// Adds `other`'s triggers (a pass that failed, to be tried again).
    package mutating func merge(_ other: ChatKeyTriggers) {
        chats.formUnion(other.chats)
        keys.formUnion(other.keys)
        for chat in chats { messages[chat] = nil }
        for (chat, ids) in other.messages { list(ids, in: chat) }
    }

    /// Lists received messages of `chat`, unless it is looked at whole;
    /// past `messagesPerChat` it is (and the list need not grow).
    private mutating func list(_ ids: [EventID], in chat: ObjectID) {
        guard !chats.contains(chat) else { return }
        messages[chat, default: []].append(contentsOf: ids)
        if messages[chat, default: []].count > Self.messagesPerChat {
            messages[chat] = nil
            chats.insert(chat)
        }
    }

    /// Notes a received event; returns whether it can change an entitlement.
    /// Its kind says how (`EventKind.chatKeyRole`).
    @discardableResult
    package mutating func note(_ event: Event) -> Bool {
        switch event.kind.chatKeyRole {
        case .chatAccess:
            chats.insert(event.object)
            messages[event.object] = nil
            return true
        case .message:
            list([event.id], in: event.object)
            return true
        case .binding:
            keys.insert(event.author)
            keys.insert(event.object)
            return true
        case .deviceKey:
            keys.insert(event.author)
            return true
        case .none:
            return false
        }
    }
}
