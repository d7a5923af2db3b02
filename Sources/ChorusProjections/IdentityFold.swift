import ChorusCBOR
import ChorusCrypto
import ChorusEvents

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
                    try decide(f, NoEffect("already_bound", "device \(device.short) is already bound to user \(b.user.short)"))
                    continue
                }
                if f.author == device {
                    try decide(f, NoEffect("self_binding", "a key cannot bind itself as its own device"))
                    continue
                }
                guard consentsChecked?[f.id] ?? Self.deviceConsents(f) else {
                    try decide(f, NoEffect("no_device_consent", "the device's signature consenting to this user is missing or invalid"))
                    continue
                }
                binding = DeviceBinding(
                    user: f.author, addedHLC: f.hlc, addedBy: f.id, removedHLC: nil,
                    name: f.readIfHeld(DeviceAddedPayload.self)?.name)
                try decide(f, nil)
            case .deviceRemoved:
                guard let b = binding else {
                    try decide(f, NoEffect("not_bound", "device \(device.short) is not bound to a user at this point"))
                    continue
                }
                guard f.author == b.user else {
                    try decide(f, NoEffect("not_owner", "only user \(b.user.short) may remove this device"))
                    continue
                }
                guard b.removedHLC == nil else {
                    try decide(f, NoEffect("already_removed", "the device was already removed"))
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
