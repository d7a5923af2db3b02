import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusStorage

// What every fold of a run shares: reading an object's facts and their
// payloads, writing its state, deciding whether a fact took effect, who
// acted for a device, and what deletion purges.
extension FoldRun {
    /// The facts filed under `object`, in merge order, with the payloads
    /// of the kinds `payloadNeeded` names (all by default) read from the log.
    func facts(_ cls: ObjectClass, _ object: Bytes32, payloadNeeded: (EventKind) -> Bool = { _ in true }) throws -> [Fact] {
        if let bulkFacts, bulkFacts.cls == cls, let read = bulkFacts.facts[object] { return read }
        let read = try p.factEntries(prefix: Projections.factKeyPrefix(cls, object), in: txn).map { key, value in
            let kind = Fact.kind(ofValue: value)
            return try Fact.load(
                key: key, value: value, log: p.log, in: txn, preloaded: preloaded, withPayload: kind.map(payloadNeeded) ?? true)
        }
        if !bulk { p.factsReadByFolds.add(read.count) }
        return read
    }

    /// A message's facts: its `message.sent` (nil when this node does not
    /// hold one under that id) and its edits and deletions in merge order.
    /// The send is not filed as a fact: it is `given` (a bulk fold's), or
    /// comes from this run's new sends, or from the log by the arrival
    /// position the chat's message index or `ids` names.
    func messageFacts(_ message: EventID, sent given: Fact? = nil) throws -> (sent: Fact?, edits: [Fact], all: [Fact]) {
        let edits = try bulkMessageEdits.map { $0[message] ?? [] } ?? facts(.message, message)
        var sent = given ?? sentFacts[message]
        if sent == nil, let stored = try p.sentEvent(message, at: sentArrivals[message], in: txn) {
            // Read back like a fact (counted with them).
            if !bulk { p.factsReadByFolds.add(1) }
            sent = Fact(stored)
        }
        return (sent, edits, (sent.map { [$0] } ?? []) + edits)
    }

    /// `f` with its payload, read from the log if it was loaded without.
    func withPayload(_ f: Fact) throws -> Fact {
        guard f.payload == nil else { return f }
        var payload: CBORValue? = nil
        if let preloaded, let held = preloaded.payloads[f.arrival] {
            payload = held
        } else if let bytes = try p.log.readPayload(at: f.arrival, in: txn) {
            payload = try Codec.decode(bytes, "payload of the event at arrival \(f.arrival)")
        }
        return Fact(order: f.order, kind: f.kind, object: f.object, arrival: f.arrival, payload: payload)
    }

    /// Whether a per-identity re-fold (`only`: the identities re-folded
    /// and the run's new facts) takes in `f`, whose acting identity is now
    /// `actor` (nil: its device was removed before it): the new facts, those
    /// of the re-folded identities, and those of devices whose binding
    /// changed in this run that now act for nobody. Only the changed
    /// devices' facts changed identity (Specs/projections.md §9.1).
    func refolds(_ f: Fact, actor: PublicKey?, only: (users: Set<PublicKey>, new: Set<EventID>)) -> Bool {
        if only.new.contains(f.id) { return true }
        if let actor { return only.users.contains(actor) }
        return changedDevices[f.author] != nil
    }

    /// Makes the state entries under `prefix` exactly `entries`. Returns
    /// whether anything changed.
    @discardableResult
    mutating func replace(prefix: [UInt8], with entries: [StateKey: [UInt8]]) throws -> Bool {
        if bulk {
            // A bulk fold folds each object once, from empty state (§9.2):
            // there is nothing under `prefix` to read, compare or delete.
            for (k, v) in entries { try putState(k.bytes, v) }
            return !entries.isEmpty
        }
        var existing: [StateKey: [UInt8]] = [:]
        try txn.scan(p.state, prefix: prefix) { k, v in
            existing[StateKey(k)] = v
            return true
        }
        var changed = false
        for (k, v) in entries where existing[k] != v {
            try putState(k.bytes, v)
            changed = true
        }
        for k in existing.keys where entries[k] == nil {
            try deleteState(k.bytes)
            changed = true
        }
        return changed
    }

    /// Records why an event takes no effect, or clears the record.
    mutating func decide(_ fact: Fact, _ reason: NoEffect?) throws {
        try decide(fact.id, at: fact.arrival, reason)
    }

    /// Records why the event at `arrival` takes no effect, or clears its
    /// record. The stored record is keyed by the arrival position, not the
    /// event id (Specs/projections.md §9.1): a commit's decisions then land
    /// together at the end of the table instead of on pages all over it.
    mutating func decide(_ id: EventID, at arrival: UInt64, _ reason: NoEffect?) throws {
        if bufferedDecisions != nil {
            // Off the write transaction, in a bulk fold: the state held no
            // decision before, so clearing one is only clearing this run's.
            if let reason {
                bufferedDecisions?[arrival] = Projections.encodeNoEffect(reason)
                decidedNoEffect.insert(arrival)
            } else if decidedNoEffect.remove(arrival) != nil {
                bufferedDecisions?[arrival] = nil
            }
            return
        }
        let key = Projections.noEffectKey(arrival)
        if let reason {
            try txn.put(p.state, key, Projections.encodeNoEffect(reason))
            decidedNoEffect.insert(arrival)
        } else if !(bulk || newEvents.contains(id)) || decidedNoEffect.contains(arrival) {
            try txn.delete(p.state, key)
        }
    }

    /// The device binding of `key`, cached for this run.
    mutating func binding(_ key: Bytes32) throws -> DeviceBinding? {
        if let knownBindings { return knownBindings[key] }
        if let cached = bindings[key] { return cached }
        let b = try txn.get(p.state, Table.device.key(key)).map { try DeviceBinding.decode($0) }
        bindings[key] = .some(b)
        return b
    }

    /// The user an event by `author` at `hlc` acts for: the user the device
    /// is bound to, the key itself when it is not a bound device (user keys,
    /// issuers, devices whose binding has not arrived), or nil when the
    /// device was removed at or before `hlc`.
    mutating func actingUser(_ author: PublicKey, at hlc: HLC) throws -> PublicKey? {
        guard let b = try binding(author) else { return author }
        if let removed = b.removedHLC, hlc >= removed { return nil }
        return b.user
    }

    mutating func actor(_ fact: Fact) throws -> Result<PublicKey, NoEffect> {
        guard let user = try actingUser(fact.author, at: fact.hlc) else {
            return .failure(NoEffect("device_removed", "device \(fact.author.short) was removed from its user before this event"))
        }
        return .success(user)
    }

    /// The acting user of a fact, or nil after recording why it has none.
    mutating func actingUserOrRecord(_ fact: Fact) throws -> PublicKey? {
        switch try actor(fact) {
        case .failure(let why):
            try decide(fact, why)
            return nil
        case .success(let user): return user
        }
    }

    /// Whether `f`'s acting user is `user`; when not, decides it with the
    /// acting user's failure or `notOwner` (an event acting on what only
    /// its user may change: a profile, a relay list, slots).
    mutating func actsFor(_ user: PublicKey, _ f: Fact, notOwner: @autoclosure () -> NoEffect) throws -> Bool {
        switch try actor(f) {
        case .failure(let why): try decide(f, why)
        case .success(let actor) where actor != user: try decide(f, notOwner())
        case .success: return true
        }
        return false
    }

    /// Decides a new creation `f` of a picture or chat whose effective
    /// creation is `effective` from the two creations alone (§6.3, §6.5);
    /// false when the object must be folded whole. The effective creation is
    /// bound to its key exactly when some creation is: then a creation not
    /// bound to its own key is foreign; the first creation bound to its key
    /// after unbound ones, or one ordered before the effective one, may
    /// change which takes effect.
    mutating func foldLaterCreation(
        _ f: Fact, of object: ObjectID, effective: MergeOrder, foreign: (ObjectID) -> NoEffect, exists: (ObjectID) -> NoEffect
    ) throws -> Bool {
        let effectiveBound = CreatedID.isBound(object, to: effective.author)
        let bound = CreatedID.isBound(object, to: f.author)
        guard effectiveBound || !bound else { return false }
        guard try actingUserOrRecord(f) != nil else { return true }
        if effectiveBound && !bound {
            try decide(f, foreign(object))
            return true
        }
        guard f.order > effective else { return false }
        try decide(f, exists(object))
        return true
    }

    /// Decides to purge the payload of a fact's logged event (Specs/projections.md §6.3, §6.6).
    mutating func purge(_ fact: Fact) {
        guard fact.payload != nil, fact.kind.payloadIsPurgeable else { return }
        purges.payloads.append(fact.arrival)
    }
}
