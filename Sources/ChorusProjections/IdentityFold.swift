import ChorusCBOR
import ChorusCrypto
import ChorusEvents

/// The reasons device bindings and removals take no effect
/// (Specs/projections.md §6.1), one wording for the whole and the
/// one-at-a-time fold.
enum DeviceRule {
    static func alreadyBound(_ device: Bytes32, to user: PublicKey) -> NoEffect {
        NoEffect("already_bound", "device \(device.short) is already bound to user \(user.short)")
    }
    static let selfBinding = NoEffect("self_binding", "a key cannot bind itself as its own device")
    static let noConsent = NoEffect("no_device_consent", "the device's signature consenting to this user is missing or invalid")
    static func notBound(_ device: Bytes32) -> NoEffect {
        NoEffect("not_bound", "device \(device.short) is not bound to a user at this point")
    }
    static func notOwner(_ user: PublicKey) -> NoEffect { NoEffect("not_owner", "only user \(user.short) may remove this device") }
    static let alreadyRemoved = NoEffect("already_removed", "the device was already removed")
}

extension FoldRun {
    /// Device bindings (Specs/projections.md §6.1). Returns true when the
    /// device's user or removal time changed, which changes how every event
    /// the device signed is attributed.
    mutating func foldDevice(_ device: Bytes32) throws -> Bool {
        var binding: DeviceBinding? = nil
        for f in try facts(.device, device) {
            switch f.kind {
            case .deviceAdded:
                if let b = binding {
                    try decide(f, DeviceRule.alreadyBound(device, to: b.user))
                    continue
                }
                if f.author == device {
                    try decide(f, DeviceRule.selfBinding)
                    continue
                }
                guard consentsChecked?[f.id] ?? Self.deviceConsents(f) else {
                    try decide(f, DeviceRule.noConsent)
                    continue
                }
                binding = DeviceBinding(
                    user: f.author, addedHLC: f.hlc, addedBy: f.id, removedHLC: nil,
                    name: f.readIfHeld(DeviceAddedPayload.self)?.name)
                try decide(f, nil)
            case .deviceRemoved:
                guard let b = binding else {
                    try decide(f, DeviceRule.notBound(device))
                    continue
                }
                guard f.author == b.user else {
                    try decide(f, DeviceRule.notOwner(b.user))
                    continue
                }
                guard b.removedHLC == nil else {
                    try decide(f, DeviceRule.alreadyRemoved)
                    continue
                }
                binding = DeviceBinding(user: b.user, addedHLC: b.addedHLC, addedBy: b.addedBy, removedHLC: f.hlc, name: b.name)
                try decide(f, nil)
            default:
                throw ProjectionError.corrupt("\(f.kind.name) filed as a device fact")
            }
        }
        let key = Table.device.key(device)
        let old = try txn.get(p.state, key).map { try DeviceBinding.decode($0) }
        if let old { try txn.delete(p.state, Table.userDevice.key(old.user, device)) }
        if let binding {
            try txn.put(p.state, key, binding.encoded())
            try txn.put(p.state, Table.userDevice.key(binding.user, device), [])
        } else {
            try txn.delete(p.state, key)
        }
        bindings[device] = .some(binding)
        let changed = old?.user != binding?.user || old?.removedHLC != binding?.removedHLC
        // A bulk fold marks nothing (`foldInBulk`): every class after
        // devices folds whole, and the coin ledger from all of its facts;
        // nor does it read `index`, which a rebuild is still writing (§9.2).
        if changed, !bulk {
            // Whom the device's events acted for before and after: an unbound key acts for itself.
            changedDevices[device, default: []].formUnion([old?.user ?? device, binding?.user ?? device])
            for user in [old?.user, binding?.user].compactMap({ $0 }) {
                try markCoinsOf(user)
                usersWithChangedDevices.insert(user)
            }
        }
        return changed
    }

    /// Folds one new event of `device` from its stored binding alone where
    /// that decides it, as the whole fold would (Specs/projections.md
    /// §9.1): an addition without consent or by the device itself, one
    /// after the binding, a removal while unbound, by another user or after
    /// the removal. False when the device must be folded whole: an event
    /// that may bind or unbind it, a removal at the stored removal's HLC.
    mutating func foldDeviceFact(_ device: Bytes32, _ f: Fact) throws -> Bool {
        let stored = try txn.get(p.state, Table.device.key(device)).map(DeviceBinding.decode)
        let bindingOrder = stored.map { MergeOrder(hlc: $0.addedHLC, author: $0.user, id: $0.addedBy) }
        switch f.kind {
        case .deviceAdded:
            if let stored, let bindingOrder, f.order > bindingOrder {
                try decide(f, DeviceRule.alreadyBound(device, to: stored.user))
            } else if f.author == device {
                try decide(f, DeviceRule.selfBinding)
            } else if !(consentsChecked?[f.id] ?? Self.deviceConsents(f)) {
                try decide(f, DeviceRule.noConsent)
            } else {
                return false
            }
        case .deviceRemoved:
            guard let stored, let bindingOrder, f.order > bindingOrder else {
                try decide(f, DeviceRule.notBound(device))
                return true
            }
            guard f.author == stored.user else {
                try decide(f, DeviceRule.notOwner(stored.user))
                return true
            }
            // The removal is the binding user's too, so HLCs order the two unless equal.
            guard let removed = stored.removedHLC, f.hlc > removed else { return false }
            try decide(f, DeviceRule.alreadyRemoved)
        default:
            throw ProjectionError.corrupt("\(f.kind.name) filed as a device fact")
        }
        return true
    }

    /// Whether a `device.added` carries the device's signature consenting
    /// to its author as its user (Specs/projections.md §6.1).
    static func deviceConsents(_ f: Fact) -> Bool {
        guard let proof = f.readIfHeld(DeviceAddedPayload.self)?.proof else { return false }
        return Ed25519.verify(signature: proof, message: DeviceBinding.proofMessage(user: f.author), publicKey: f.object)
    }

    /// Re-folds everything the device signed: its events now act for
    /// another user, or stop acting at another time.
    mutating func deviceChanged(_ device: Bytes32) throws {
        // Everything the device signed: its feed (no index of its own, so
        // an event costs no extra write for this rare case). Its events in
        // this run are filed and marked already (`Projections.file`) and
        // are decided after the bindings, so they are not read again: a
        // first sync brings a binding and its device's events together.
        var touched: [(ObjectClass, Bytes32)] = []
        var sends: [Fact] = []
        try p.log.forEachEvent(of: device, in: txn, except: newArrivals) { stored in
            for (cls, object) in ObjectClass.targets(of: stored.event) where cls != .device && cls != .coins { touched.append((cls, object)) }
            // A send is not a fact (§9.1): its message folds from the event in hand.
            if stored.event.kind == .messageSent { sends.append(Fact(stored)) }
        }
        let identities = changedDevices[device] ?? []
        for (cls, object) in touched {
            switch cls {
            case .follow, .like, .block:
                // Only the edges of the identities the device acted for change.
                relationshipRefolds[RelationshipKey(cls: cls, target: object), default: []].formUnion(identities)
            case .reads:
                // Likewise only those identities' read markers.
                readRefolds[object, default: []].formUnion(identities)
            default: mark(cls, object)
            }
        }
        for fact in sends {
            sentFacts[fact.id] = fact
            // Whose messages these are may change without changing their
            // effect (a device rebound to another member): every count in
            // their chats is found again.
            chatActivityChanged(fact.object)
        }
        try markCoinsOf(device)
    }

    /// Decides again every coin event naming `key`: a binding change can
    /// change who acts, and where a gift lands.
    mutating func markCoinsOf(_ key: Bytes32) throws {
        let prefix = IndexTable.coinParty.key(key)
        try txn.scan(p.index, prefix: prefix) { k, _ in
            markCoins(try MergeOrder(bytes: k[33...]))
            return true
        }
    }

    /// The device a gift without an explicit device lands on: the user's
    /// earliest-bound device not removed at `hlc`, else the user key itself.
    mutating func primaryDevice(of user: PublicKey, at hlc: HLC) throws -> PublicKey {
        var best: (order: MergeOrder, device: PublicKey)? = nil
        var devices: [PublicKey] = []
        try txn.scan(p.state, prefix: Table.userDevice.key(user)) { key, _ in
            devices.append(try Codec.b32(key[33...], "device"))
            return true
        }
        for d in devices {
            guard let b = try binding(d), b.user == user else { continue }
            if let removed = b.removedHLC, hlc >= removed { continue }
            let order = MergeOrder(hlc: b.addedHLC, author: user, id: b.addedBy)
            if let current = best, current.order <= order { continue }
            best = (order, d)
        }
        return best?.device ?? user
    }
}
