import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusStorage

/// One pass of folding inside one write transaction: the objects touched by
/// the transaction's events are re-folded once each, in dependency order
/// (device bindings first, since every other rule reads them; chats before
/// their messages and read markers; the coin ledger last).
struct FoldRun {
    let p: Projections
    let txn: Transaction
    var dirty: [ObjectClass: Set<Bytes32>] = [:]
    /// Coin events to decide again: new ones, and those whose rule inputs
    /// changed (Specs/projections.md §6.9.1).
    var coinsDirty: Set<MergeOrder> = []
    var bindings: [Bytes32: DeviceBinding?] = [:]
    /// A bulk fold after device bindings are folded and committed: every
    /// binding, read once for the whole rebuild (none changes while the
    /// other classes fold, §9.2); a key it lacks is bound to no user. Nil
    /// in every other fold, which reads bindings from the state.
    var knownBindings: [Bytes32: DeviceBinding]? = nil
    /// Users whose device bindings changed in this run: their chats' key
    /// wraps are decided again (Specs/projections.md §6.11).
    var usersWithChangedDevices: Set<PublicKey> = []
    /// New relationship facts of this transaction, folded one by one unless
    /// their target is re-folded whole.
    var relationshipFacts: [RelationshipKey: [Fact]] = [:]
    /// Devices whose binding changed in this run, with the identities their
    /// events acted for before and after (the device key itself while unbound).
    var changedDevices: [Bytes32: Set<PublicKey>] = [:]
    /// Relationship targets with facts by devices whose binding changed:
    /// the edges of these identities are folded again from the target's
    /// facts, with the run's new facts for the target (§9.1).
    var relationshipRefolds: [RelationshipKey: Set<PublicKey>] = [:]
    /// Chats whose read markers of some identities are folded again (their
    /// membership or device binding changed), with the run's new markers
    /// for the chat (§9.1).
    var readRefolds: [ObjectID: Set<PublicKey>] = [:]
    /// New facts of this transaction, by class and object, for the classes
    /// that fold one event at a time where the object's stored state
    /// decides it (`foldOneByOne`, the `fold…Fact` of each class, §9.1):
    /// every class but relationships and coins, which keep their own.
    var newFacts: [ObjectClass: [Bytes32: [Fact]]] = [:]
    /// Events first stored in this transaction (not refilled ones): they
    /// have no decision recorded yet, so clearing one is a no-op that can be
    /// skipped, and a new send has no `message` entry yet...
    var newEvents: Set<EventID> = []
    /// ...unless this run recorded one for them (by arrival position).
    var decidedNoEffect: Set<UInt64> = []
    /// The arrival positions of the events this run files: a device whose
    /// binding changes need not read them back (`deviceChanged`).
    var newArrivals: Set<UInt64> = []
    /// The new `message.sent` events of this run's messages, by message
    /// id, as filed (not read back from the log). A message's send is not
    /// a fact (§9.1); a bulk fold hands each its send (`foldMessage(_:held:)`).
    var sentFacts: [EventID: Fact] = [:]
    /// Arrival positions of sends known from the chat's message index, so
    /// re-folding a chat's messages reads each from the log directly.
    var sentArrivals: [EventID: UInt64] = [:]
    /// A bulk fold of held messages takes every message's edits and
    /// deletions from here instead of a `facts` lookup per message: most
    /// messages have none, and the rebuild read them all in one scan.
    var bulkMessageEdits: [EventID: [Fact]]? = nil
    /// A bulk fold's objects of one class with their facts, read ahead
    /// (`Projections.objectSlice`): `facts` takes them from here.
    var bulkFacts: (cls: ObjectClass, facts: [Bytes32: [Fact]])? = nil
    /// Chat memberships read while folding messages (final by then: every
    /// chat of the run is folded before its messages).
    var membershipsForMessages: [MemberKey: Membership?] = [:]
    /// Changes to each chat's message count, written once at the end.
    var messageCountDeltas: [ObjectID: Int] = [:]
    /// What this run changed that chats' entries (§9.1,
    /// `IndexTable.chatActivity`) show, written once at its end.
    var chatActivity = ChatActivityChanges()
    /// A bulk fold of messages buffers their state entries (records and
    /// blob references, which nothing reads back during that fold) and
    /// writes them in key order at the end: message ids are random, their
    /// state keys are not (`writeBuffered`).
    var bufferedState: SortedEntries? = nil
    /// A bulk fold run off the write transaction, on a read transaction
    /// beside the other parts of its slice (`Projections.foldedInParts`:
    /// held messages and the classes `foldOffTheWriteTransaction` names): its no-effect
    /// decisions, by arrival position, collected here, its state entries in
    /// `bufferedState`; the caller writes both. Nil in every other fold.
    var bufferedDecisions: [UInt64: [UInt8]]? = nil
    /// The `index` entries of a fold off the write transaction that writes
    /// any (the coin ledger's, `Projections.foldCoinsAlone`); the caller
    /// writes them. Nil in every other fold, which puts them directly.
    var bufferedIndex: SortedEntries? = nil
    /// The coin ledger folded off the write transaction: whether each entry
    /// it decided took effect, where the walk reads an earlier one back
    /// (`effectiveGroupMember`). Nil in every other fold.
    var ledgerDecided: [MergeOrder: Bool]? = nil
    /// A bulk fold's payloads, read and decoded ahead for the objects it folds.
    var preloaded: PreloadedPayloads? = nil
    /// A bulk fold of device bindings: whether each `device.added` fact of
    /// its objects carries a consent signature that verifies, checked ahead
    /// on all cores (`Projections.buildSlice`). `foldDevice` checks any
    /// other itself.
    var consentsChecked: [EventID: Bool]? = nil
    /// The payloads and blobs this run decided to purge, carried out by the
    /// store once the fold is done (`Purges`).
    var purges = Purges()
    /// The pictures a bulk fold that does not purge found deleted, and
    /// what the deleted messages it folded leave to purge: final, since a
    /// bulk fold folds each object once with every fact (§9.2), so the
    /// rebuild purges them at the end without scanning the state for them.
    var deletedInBulk = DeletedObjects()

    struct DeletedObjects {
        var pictures: [ObjectID] = []
        /// Decided from each message's facts in hand (`FoldRun.foldMessage`),
        /// so the end of the rebuild need not read them again.
        var messagePurges = Purges()

        mutating func absorb(_ other: DeletedObjects) {
            pictures += other.pictures
            messagePurges.add(other.messagePurges)
        }
    }

    struct MemberKey: Hashable {
        let chat: ObjectID
        let user: PublicKey
    }

    struct RelationshipKey: Hashable {
        let cls: ObjectClass
        let target: Bytes32
    }

    /// Whether effective deletions purge now. A whole-log fold in slices
    /// leaves purges, which cannot be undone, to its end: a bulk rebuild
    /// purges what its folds recorded (`deletedInBulk`).
    let purging: Bool

    /// A bulk fold (a rebuild from empty state, Specs/projections.md §9.2):
    /// every object is folded once, after every object it depends on, so
    /// nothing is marked for folding again and no decision needs clearing.
    let bulk: Bool

    init(projections: Projections, txn: Transaction, purging: Bool = true, bulk: Bool = false) {
        self.p = projections
        self.txn = txn
        self.purging = purging
        self.bulk = bulk
    }

    /// Folds each of `objects` of class `cls` once, from all of its facts,
    /// without marking anything else: the bulk rebuild calls this class by
    /// class in `ObjectClass.foldOrder`, so what a fold reads (device
    /// bindings, chat memberships, pictures) is already final.
    mutating func foldInBulk(_ cls: ObjectClass, _ objects: [Bytes32]) throws {
        if cls == .message { bufferedState = SortedEntries() }
        defer { bufferedState = nil }
        for object in objects {
            switch cls {
            case .device: _ = try foldDevice(object)
            case .deviceKey: try foldDeviceKey(object)
            case .profile: try foldProfile(object)
            case .picture: try foldPicture(object)
            case .follow, .like, .block: try foldRelationship(cls, object)
            case .slots: try foldSlots(object)
            case .chat: _ = try foldChat(object)
            case .reads: try foldReads(object)
            case .chatKeys: try foldChatKeys(object)
            case .message: try foldMessage(object)
            case .coins: try foldCoinsInBulk()
            }
        }
        if var buffered = bufferedState {
            buffered.sort()
            try buffered.write(0..<buffered.count, to: p.state, in: txn, append: false)
        }
        try writeMessageCounts()
    }

    /// Puts a state entry, or buffers it during a bulk fold of messages and
    /// in a fold off the write transaction.
    mutating func putState(_ key: [UInt8], _ value: [UInt8]) throws {
        if bufferedState != nil { bufferedState?.add(key, value) } else { try txn.put(p.state, key, value) }
    }

    /// Puts an `index` entry, or buffers it off the write transaction.
    mutating func putIndex(_ key: [UInt8], _ value: [UInt8]) throws {
        if bufferedIndex != nil { bufferedIndex?.add(key, value) } else { try txn.put(p.index, key, value) }
    }

    /// Deletes an `index` entry. Off the write transaction (a bulk fold,
    /// from an `index` that holds nothing of the object yet) there is
    /// nothing to delete.
    mutating func deleteIndex(_ key: [UInt8]) throws {
        if bufferedIndex == nil { try txn.delete(p.index, key) }
    }

    /// Keeps `object`'s `payloadGap` entry (§9.1) present exactly while it
    /// is live with its payload purged here; `was` says whether the state
    /// it replaces was, so an object that stays as it was costs nothing.
    mutating func setPayloadGap(_ cls: ObjectClass, _ object: Bytes32, was: Bool, now: Bool) throws {
        guard was != now else { return }
        let key = IndexTable.payloadGap.key(cls.rawValue, object)
        if now { try putIndex(key, []) } else { try deleteIndex(key) }
    }

    /// Notes that a live object references `blob` (its `blobRef` entry is
    /// put): while this node lacks the blob, a `blobWanted` entry (§9.1)
    /// says so, for sync to fetch it.
    mutating func blobReferenced(_ blob: Hash32) throws {
        if try !p.blobs.contains(blob, in: txn) { try putIndex(IndexTable.blobWanted.key(blob), []) }
    }

    /// Notes that a `blobRef` entry of `blob` was deleted: once no live
    /// object references the blob, it is not wanted. A bulk fold starts
    /// from an empty state, where no object it folds had put one.
    mutating func blobUnreferenced(_ blob: Hash32) throws {
        guard !bulk, try !p.isBlobReferenced(blob, in: txn) else { return }
        try deleteIndex(IndexTable.blobWanted.key(blob))
    }

    /// Deletes a state entry. Off the write transaction (a bulk fold, from
    /// state that holds nothing of the object yet) there is nothing to
    /// delete: a fold deletes before it puts, and an entry the committed
    /// state does hold means the fold was run where it must not be.
    mutating func deleteState(_ key: [UInt8]) throws {
        guard bufferedDecisions != nil else {
            try txn.delete(p.state, key)
            return
        }
        if try txn.get(p.state, key) != nil {
            throw ProjectionError.corrupt("a bulk fold off the write transaction found a state entry to delete")
        }
    }

    mutating func mark(_ cls: ObjectClass, _ object: Bytes32) { dirty[cls, default: []].insert(object) }

    mutating func addNewFact(_ cls: ObjectClass, _ object: Bytes32, _ fact: Fact) {
        newFacts[cls, default: [:]][object, default: []].append(fact)
    }

    mutating func addRelationshipFact(_ cls: ObjectClass, _ target: Bytes32, _ fact: Fact) {
        relationshipFacts[RelationshipKey(cls: cls, target: target), default: []].append(fact)
    }

    mutating func markCoins(_ order: MergeOrder) { coinsDirty.insert(order) }

    /// A new `message.sent`: its message is folded with the send in hand.
    mutating func addSent(_ fact: Fact) {
        sentFacts[fact.id] = fact
        mark(.message, fact.id)
    }

    /// Folds what this run marked, class by class in the registry's order
    /// (`ObjectClass.foldOrder`): what a class's rules read is final before
    /// it is folded, and a class marked by another is folded after it.
    mutating func execute() throws {
        for cls in ObjectClass.foldOrder { try foldMarked(cls) }
        try writeChatActivity()
    }

    /// Folds this run's marked objects and new facts of `cls`. The switch
    /// has no default: a new class does not compile until it says how it
    /// is folded incrementally (Specs/adding-a-kind.md).
    mutating func foldMarked(_ cls: ObjectClass) throws {
        switch cls {
        case .device:
            try foldOneByOne(.device) { run, device, fact in try run.foldDeviceFact(device, fact) }
            for device in (dirty[.device] ?? []).sorted() {
                if try foldDevice(device) { try deviceChanged(device) }
            }
            bindings.removeAll()
        case .profile:
            // A profile re-folded whole (its user's device bindings changed) already has its new edits.
            for (user, facts) in (newFacts[.profile] ?? [:]).sorted(by: { $0.key < $1.key }) where dirty[.profile]?.contains(user) != true {
                for fact in facts { try foldProfileFact(user, fact) }
            }
            for user in (dirty[.profile] ?? []).sorted() { try foldProfile(user) }
        case .picture:
            try foldOneByOne(.picture) { run, picture, fact in try run.foldPictureFact(picture, fact) }
            for picture in (dirty[.picture] ?? []).sorted() { try foldPicture(picture) }
        case .follow, .like, .block:
            try foldMarkedRelationships(cls)
        case .slots:
            try foldOneByOne(.slots) { run, user, fact in try run.foldSlotFact(user, fact) }
            for user in (dirty[.slots] ?? []).sorted() { try foldSlots(user) }
        case .deviceKey:
            try foldOneByOne(.deviceKey) { run, device, fact in
                try run.foldDeviceKeyFact(device, fact)
                return true
            }
            for device in (dirty[.deviceKey] ?? []).sorted() { try foldDeviceKey(device) }
        case .chat:
            try foldMarkedChats()
        case .reads:
            for chat in (dirty[.reads] ?? []).sorted() { try foldReads(chat) }
            for (chat, users) in readRefolds.sorted(by: { $0.key < $1.key }) where dirty[.reads]?.contains(chat) != true {
                let new = newFacts[.reads]?[chat] ?? []
                var users = users
                for f in new { if let user = try actingUser(f.author, at: f.hlc) { users.insert(user) } }
                try foldReads(chat, only: (users, Set(new.map(\.id))))
            }
            for (chat, facts) in (newFacts[.reads] ?? [:]).sorted(by: { $0.key < $1.key })
            where dirty[.reads]?.contains(chat) != true && readRefolds[chat] == nil {
                for fact in facts.sorted(by: { $0.order < $1.order }) { try foldReadFact(chat, fact) }
            }
        case .chatKeys:
            try foldOneByOne(.chatKeys) { run, chat, fact in try run.foldChatKeyFact(chat, fact) }
            for chat in (dirty[.chatKeys] ?? []).sorted() { try foldChatKeys(chat) }
        case .message:
            try foldOneByOne(.message) { run, message, fact in try run.foldMessageFact(message, fact) }
            try foldMessages((dirty[.message] ?? []).sorted())
            try writeMessageCounts()
        case .coins:
            if !coinsDirty.isEmpty { try foldCoins(dirty: coinsDirty) }
        }
    }

    /// Folds each object's new facts one at a time with `fold`, in merge
    /// order, where it can (it returns false when the object must be folded
    /// whole); an object already marked, or with a refilled event (decided
    /// before), is left marked to be folded whole.
    mutating func foldOneByOne(_ cls: ObjectClass, _ fold: (inout FoldRun, Bytes32, Fact) throws -> Bool) throws {
        for (object, facts) in (newFacts[cls] ?? [:]).sorted(by: { $0.key < $1.key }) where dirty[cls]?.contains(object) != true {
            guard facts.allSatisfy({ newEvents.contains($0.id) }) else {
                mark(cls, object)
                continue
            }
            for fact in facts.sorted(by: { $0.order < $1.order }) {
                guard try fold(&self, object, fact) else {
                    mark(cls, object)
                    break
                }
            }
        }
    }

    /// The follows, likes or blocks (`cls`) this run touched: targets whose
    /// users' bindings changed are folded again for those users, new facts
    /// of the others are applied one by one, marked targets whole.
    mutating func foldMarkedRelationships(_ cls: ObjectClass) throws {
        let marked = dirty[cls] ?? []
        for (key, users) in relationshipRefolds.filter({ $0.key.cls == cls }).sorted(by: { $0.key.target < $1.key.target })
        where !marked.contains(key.target) {
            let new = relationshipFacts[key] ?? []
            var users = users
            for f in new { if let user = try actingUser(f.author, at: f.hlc) { users.insert(user) } }
            try foldRelationship(key.cls, key.target, only: (users, Set(new.map(\.id))))
        }
        for (key, facts) in relationshipFacts.filter({ $0.key.cls == cls }).sorted(by: { $0.key.target < $1.key.target })
        where !marked.contains(key.target) && relationshipRefolds[key] == nil {
            for fact in facts.sorted(by: { $0.order < $1.order }) { try foldRelationshipFact(key.cls, key.target, fact) }
        }
        for target in marked.sorted() { try foldRelationship(cls, target) }
    }

    /// The chats this run marked: each folded whole; where membership
    /// changed, its read markers, its keys and the messages of the users
    /// whose membership changed are marked for their classes, which fold
    /// after chats. So are the chat keys of every chat of a user whose
    /// devices changed.
    mutating func foldMarkedChats() throws {
        try foldOneByOne(.chat) { run, chat, fact in try run.foldChatFact(chat, fact) }
        for chat in (dirty[.chat] ?? []).sorted() {
            let existed = try txn.get(p.state, Table.chat.key(chat)) != nil
            let changed = try foldChat(chat)
            let exists = try txn.get(p.state, Table.chat.key(chat)) != nil
            try membershipsChanged(in: chat, changed, existenceChanged: existed != exists)
        }
        for user in usersWithChangedDevices.sorted() {
            try txn.scan(p.index, prefix: IndexTable.memberOf.key(user)) { key, _ in
                mark(.chatKeys, try Codec.b32(key.suffix(32), "chat id"))
                return true
            }
        }
    }

    /// What a change of `chat`'s memberships (`changed`: each user's span
    /// of time where it changed, nil when only `admin` did) decides again,
    /// in the classes that fold after chats. A read marker's or key event's
    /// decision (and a key event's wraps) read the chat's existence and the
    /// memberships at its HLC alone: where the chat's existence did not
    /// change and none is stamped from the first moment a membership changed
    /// on, none is decided otherwise (a member who joins or leaves now
    /// re-folds none of the chat's markers or keys). A message's decision
    /// reads only its sender's membership at its HLC: only the messages of
    /// users whose membership changed, sent while it did, are decided again,
    /// and the chat's messages are read from the first of those moments
    /// only. A message of a removed device takes no effect whatever the
    /// membership; a device whose binding changed in this run had all its
    /// events marked already (`deviceChanged`).
    mutating func membershipsChanged(in chat: ObjectID, _ changed: [PublicKey: (from: HLC, to: HLC?)?], existenceChanged: Bool) throws {
        guard !changed.isEmpty else { return }
        let spans = changed.compactMapValues { $0 }
        let from = spans.values.map(\.from).min()
        func affects(_ cls: ObjectClass) throws -> Bool {
            guard !existenceChanged else { return true }
            guard let from else { return false }
            return try p.hasFact(at: from, orLaterOf: cls, chat, in: txn)
        }
        if try affects(.reads) { readRefolds[chat, default: []].formUnion(changed.keys) }
        if try affects(.chatKeys) { mark(.chatKeys, chat) }
        guard let from else { return }
        let until = spans.values.contains { $0.to == nil } ? nil : spans.values.compactMap(\.to).max()
        let prefix = Table.message.key(chat)
        try txn.scan(p.state, from: Table.message.key(chat, Codec.u64(from.rawValue))) { key, value in
            guard key.starts(with: prefix) else { return false }
            guard key.count == 73 else { throw ProjectionError.corrupt("message key of \(key.count) bytes") }
            let hlc = HLC(rawValue: Codec.readU64(key[33..<41]))
            if let until, hlc >= until { return false }
            let send = try MessageEntry.send(of: value)
            guard let sender = try actingUser(send.device, at: hlc), let span = spans[sender],
                span.from <= hlc, span.to.map({ hlc < $0 }) ?? true
            else { return true }
            let message = try Codec.b32(key.suffix(32), "message id")
            mark(.message, message)
            sentArrivals[message] = send.arrival
            return true
        }
    }

    /// Folds a run's messages. Their edits and deletions are read first, in
    /// message id order (the order of their `facts` keys), then each
    /// message is folded in the order of its state key (chat, sending HLC,
    /// id) where its send is in hand: a chat's new messages then land on the
    /// leaf its last ones did, which the write transaction's cursor still
    /// stands on, instead of a descent each into a random chat. Each
    /// message's fold reads only its own facts and state and what earlier
    /// classes decided, so the order changes nothing else.
    mutating func foldMessages(_ messages: [EventID]) throws {
        guard messages.count > 1, bulkMessageEdits == nil else {
            for message in messages { try foldMessage(message) }
            return
        }
        var edits: [EventID: [Fact]] = [:]
        for message in messages {
            let facts = try facts(.message, message)
            if !facts.isEmpty { edits[message] = facts }
        }
        bulkMessageEdits = edits
        defer { bulkMessageEdits = nil }
        var inHand: [(chat: Bytes32, hlc: HLC, id: EventID)] = []
        var others: [EventID] = []
        for message in messages {
            if let sent = sentFacts[message] { inHand.append((sent.object, sent.hlc, message)) } else { others.append(message) }
        }
        inHand.sort { ($0.chat, $0.hlc.rawValue, $0.id) < ($1.chat, $1.hlc.rawValue, $1.id) }
        for message in inHand { try foldMessage(message.id) }
        for message in others { try foldMessage(message) }
    }
}
