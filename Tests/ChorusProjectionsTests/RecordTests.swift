import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusStorage
@testable import ChorusProjections
import ChorusTestSupport
import Testing

@Suite("State records: direct encodings equal the canonical CBOR of their maps")
struct RecordTests {
    @Test("two memberships disagree from the first moment one holds the user and the other not, to the end of the last")
    func membershipDisagreement() {
        func h(_ t: UInt64) -> HLC { HLC(rawValue: t) }
        func m(_ intervals: [(UInt64, UInt64?)], admin: Bool = false) -> Membership {
            Membership(admin: admin, intervals: intervals.map { (h($0.0), $0.1.map(h)) })
        }
        func span(_ a: Membership?, _ b: Membership?) -> [UInt64?]? {
            Membership.disagreement(a, b).map { [$0.from.rawValue, $0.to?.rawValue] }
        }
        #expect(span(m([(10, 20)]), m([(10, 30)])) == [20, 30])
        #expect(span(m([(10, nil)]), m([(10, 20)])) == [20, nil])
        #expect(span(nil, m([(5, nil)])) == [5, nil])
        #expect(span(m([(5, 9)]), nil) == [5, 9])
        #expect(span(m([(10, 20), (30, 40)]), m([(10, 20)])) == [30, 40])
        #expect(span(m([(10, 20), (30, nil)]), m([(5, 20), (30, 35)])) == [5, nil])
        // Only `admin` differs: no message is decided otherwise.
        #expect(span(m([(10, nil)], admin: true), m([(10, nil)])) == nil)
        #expect(span(m([(10, 20), (20, 30)]), m([(10, 30)])) == nil)
    }

    @Test("a message record, with every combination of its optional fields and arguments of every width")
    func messageRecordEncoding() throws {
        var rng = SplitMix64(seed: 0x5EC0_4D5)
        func key() -> Bytes32 { Bytes32((0..<32).map { _ in UInt8(truncatingIfNeeded: rng.next()) })! }
        // Values whose CBOR arguments take 0, 1, 2, 4 and 8 bytes.
        let numbers: [UInt64] = [0, 23, 24, 255, 256, 65_535, 65_536, 4_294_967_295, 4_294_967_296, .max]
        for combination in 0..<(1 << 7) {
            for round in 0..<4 {
                func has(_ bit: Int) -> Bool { combination & (1 << bit) != 0 }
                func number() -> UInt64 { numbers[Int(rng.next() % UInt64(numbers.count))] }
                var record = MessageRecord(sender: key(), device: key(), hlc: HLC(rawValue: number()))
                if has(0) { record.body = (0..<[0, 23, 24, 300][round]).map { _ in UInt8(truncatingIfNeeded: rng.next()) } }
                if has(1) { record.blob = key() }
                if has(2) { record.size = number() }
                if has(3) { record.edited = HLC(rawValue: number()) }
                if has(4) { record.editor = key() }
                if has(5) { record.deleted = HLC(rawValue: number()) }
                if has(6) { record.purged = true }
                var map: [(String, CBORValue)] = [
                    ("sender", .bytes(record.sender.bytes)), ("device", .bytes(record.device.bytes)), ("hlc", .unsigned(record.hlc.rawValue)),
                ]
                if let v = record.body { map.append(("body", .bytes(v))) }
                if let v = record.blob { map.append(("blob", .bytes(v.bytes))) }
                if let v = record.size { map.append(("size", .unsigned(v))) }
                if let v = record.edited { map.append(("edited", .unsigned(v.rawValue))) }
                if let v = record.editor { map.append(("editor", .bytes(v.bytes))) }
                if let v = record.deleted { map.append(("deleted", .unsigned(v.rawValue))) }
                if record.purged { map.append(("purged", .bool(true))) }
                let encoded = record.encoded()
                #expect(encoded == CBOREncoder.encode(.textMap(map)), "combination \(combination)")
                #expect(try MessageRecord.decode(encoded) == record, "combination \(combination)")
            }
        }
    }

    @Test("a picture record, with every combination of its optional fields and arguments of every width")
    func pictureRecordEncoding() throws {
        var rng = SplitMix64(seed: 0x91C7_0E)
        func key() -> Bytes32 { Bytes32((0..<32).map { _ in UInt8(truncatingIfNeeded: rng.next()) })! }
        let numbers: [UInt64] = [0, 23, 24, 255, 256, 65_535, 65_536, 4_294_967_295, 4_294_967_296, .max]
        func number() -> UInt64 { numbers[Int(rng.next() % UInt64(numbers.count))] }
        let texts = ["", "image/jpeg", "a caption of twenty-four", String(repeating: "é", count: 150)]
        for combination in 0..<(1 << 10) {
            func has(_ bit: Int) -> Bool { combination & (1 << bit) != 0 }
            var record = PictureRecord(owner: key(), author: key(), hlc: HLC(rawValue: number()), createdBy: key())
            if has(0) { record.blob = key() }
            if has(1) { record.size = number() }
            if has(2) { record.mime = texts[Int(rng.next() % 4)] }
            if has(3) { record.width = number() }
            if has(4) { record.height = number() }
            if has(5) { record.caption = texts[Int(rng.next() % 4)] }
            if has(6) { record.position = (0..<[0, 8, 24, 64][Int(rng.next() % 4)]).map { _ in UInt8(truncatingIfNeeded: rng.next()) } }
            if has(7) { record.deleted = HLC(rawValue: number()) }
            if has(8) { record.deletedBy = key() }
            if has(9) { record.purged = true }
            var map: [(String, CBORValue)] = [
                ("owner", .bytes(record.owner.bytes)), ("author", .bytes(record.author.bytes)), ("hlc", .unsigned(record.hlc.rawValue)),
                ("created_by", .bytes(record.createdBy.bytes)),
            ]
            if let v = record.blob { map.append(("blob", .bytes(v.bytes))) }
            if let v = record.size { map.append(("size", .unsigned(v))) }
            if let v = record.mime { map.append(("mime", .text(v))) }
            if let v = record.width { map.append(("width", .unsigned(v))) }
            if let v = record.height { map.append(("height", .unsigned(v))) }
            if let v = record.caption { map.append(("caption", .text(v))) }
            if let v = record.position { map.append(("position", .bytes(v))) }
            if let v = record.deleted { map.append(("deleted", .unsigned(v.rawValue))) }
            if let v = record.deletedBy { map.append(("deleted_by", .bytes(v.bytes))) }
            if record.purged { map.append(("purged", .bool(true))) }
            let encoded = record.encoded()
            #expect(encoded == CBOREncoder.encode(.textMap(map)), "combination \(combination)")
            #expect(try PictureRecord.decode(encoded) == record, "combination \(combination)")
        }
    }

    @Test("a chat record, with and without a title of every width, equals its canonical map and reads back in place")
    func chatRecordEncoding() throws {
        var rng = SplitMix64(seed: 0xC4A7_2EC0)
        func key() -> Bytes32 { Bytes32((0..<32).map { _ in UInt8(truncatingIfNeeded: rng.next()) })! }
        for (i, hlc) in [UInt64(0), 23, 24, 0xFFFF, 0x1_0000_0000, .max].enumerated() {
            for titleLength in [nil, 0, 23, 24, 300] as [Int?] {
                let title = titleLength.map { n in (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) } }
                let record = ChatRecord(creator: key(), hlc: HLC(rawValue: hlc), createdBy: key(), title: title)
                var map: [(String, CBORValue)] = [
                    ("creator", .bytes(record.creator.bytes)), ("hlc", .unsigned(hlc)), ("created_by", .bytes(record.createdBy.bytes)),
                ]
                if let title { map.append(("title", .bytes(title))) }
                #expect(record.encoded() == CBOREncoder.encode(.textMap(map)), "case \(i)")
                #expect(try ChatRecord.decode(record.encoded()) == record)
                #expect(try ChatRecord.decodeWhole(record.encoded()) == record)
            }
        }
        #expect(throws: ProjectionError.self) { try ChatRecord.decode([0xA1, 0x63, 0x68, 0x6C, 0x63, 0x00]) }
    }

    @Test("a read marker equals its canonical array for HLCs of every width and reads back in place")
    func readMarkerEncoding() throws {
        var rng = SplitMix64(seed: 0x4EAD_3A4C)
        for hlc in [UInt64(0), 23, 24, 255, 256, 0xFFFF_FFFF, .max] {
            let id = Bytes32((0..<32).map { _ in UInt8(truncatingIfNeeded: rng.next()) })!
            let raw = ReadMarker.encoded(hlc: hlc, message: id)
            #expect(raw == CBOREncoder.encode(.array([.unsigned(hlc), .bytes(id.bytes)])))
            #expect(try ReadMarker.decode(raw) == ReadMarker(message: MessageID(id), hlc: HLC(rawValue: hlc)))
        }
        #expect(throws: ProjectionError.self) { try ReadMarker.decode([0x82, 0x00]) }
    }

    @Test("a membership reads in place as the whole decoder reads it, with arguments of every width; other layouts go the long way")
    func membershipInPlace() throws {
        var rng = SplitMix64(seed: 0x3E3B_E125)
        let widths: [UInt64] = [0, 23, 24, 255, 256, 65_535, 65_536, 0xFFFF_FFFF, 0x1_0000_0000, .max]
        for _ in 0..<500 {
            var intervals: [(from: HLC, to: HLC?)] = []
            for _ in 0..<Int(rng.next() % 4) {
                let from = widths[Int(rng.next() % UInt64(widths.count))]
                let to: HLC? = rng.next() % 3 == 0 ? nil : HLC(rawValue: widths[Int(rng.next() % UInt64(widths.count))])
                intervals.append((HLC(rawValue: from), to))
            }
            let m = Membership(admin: rng.next() % 2 == 0, intervals: intervals)
            let raw = m.encoded()
            #expect(try Membership.decode(raw) == m)
            #expect(try Membership.decodeWhole(raw) == m)
        }
        // A longer head than needed is not canonical: the long way refuses it.
        #expect(throws: ProjectionError.self) { try Membership.decode([0x82, 0xF5, 0x81, 0x82, 0x18, 0x05, 0xF6]) }
        // Trailing bytes or a wrong shape are damage either way.
        #expect(throws: ProjectionError.self) { try Membership.decode([0x82, 0xF5, 0x80, 0x00]) }
        #expect(throws: ProjectionError.self) { try Membership.decode([0x81, 0xF5]) }
    }

    @Test("a device binding's user reads in place as the whole decoder reads it, with and without a removal and a name")
    func bindingUserInPlace() throws {
        for removed in [nil, HLC(rawValue: 7), HLC(rawValue: .max)] {
            for name in [nil, "", "phone", String(repeating: "n", count: 300)] {
                let b = DeviceBinding(user: Random.bytes32(), addedHLC: HLC(rawValue: 1 << 40), addedBy: Random.bytes32(), removedHLC: removed, name: name)
                #expect(try DeviceBinding.user(of: b.encoded()) == b.user)
                #expect(try DeviceBinding.decode(b.encoded()) == b)
            }
        }
        // Damage is found either way.
        #expect(throws: ProjectionError.self) { try DeviceBinding.user(of: [0x85, 0x58, 0x20]) }
    }

    @Test("a stored message entry reads back whole, and any other length or flag is damage")
    func messageEntryEncoding() throws {
        var rng = SplitMix64(seed: 0xE17_4E5)
        func key() -> Bytes32 { Bytes32((0..<32).map { _ in UInt8(truncatingIfNeeded: rng.next()) })! }
        for combination in 0..<8 {
            var entry = MessageEntry(device: key(), sent: rng.next())
            if combination & 1 != 0 { entry.edit = (rng.next(), HLC(rawValue: rng.next()), key()) }
            if combination & 2 != 0 { entry.deleted = HLC(rawValue: rng.next()) }
            if combination & 4 != 0 { entry.purged = true }
            let encoded = entry.encoded()
            #expect(encoded.count == 41 + (entry.edit == nil ? 0 : 48) + (entry.deleted == nil ? 0 : 8))
            let back = try MessageEntry.decode(encoded)
            #expect(back.encoded() == encoded)
            #expect(back.device == entry.device && back.sent == entry.sent)
            #expect(back.deleted == entry.deleted && back.purged == entry.purged)
            #expect(back.edit?.arrival == entry.edit?.arrival && back.edit?.hlc == entry.edit?.hlc && back.edit?.author == entry.edit?.author)
            #expect(throws: ProjectionError.self) { try MessageEntry.decode(encoded.dropLast()) }
            #expect(throws: ProjectionError.self) { try MessageEntry.decode(encoded + [0]) }
            var unknownFlag = encoded
            unknownFlag[40] |= 16
            #expect(throws: ProjectionError.self) { try MessageEntry.decode(unknownFlag) }
            // The withdrawn flag goes with no other flag and no other field,
            // and with the reason.
            var withdrawnToo = encoded
            withdrawnToo[40] |= MessageEntry.withdrawnFlag
            #expect(throws: ProjectionError.self) { try MessageEntry.decode(withdrawnToo) }
            #expect(try !MessageEntry.isWithdrawn(encoded))
            #expect(try MessageEntry.isDeleted(encoded) == (entry.deleted != nil))
        }
        let device = key()
        let why = NoEffect("not_member", "not a member")
        let withdrawn = MessageEntry(withdrawnBy: device, sent: 42, reason: why).encoded()
        #expect(withdrawn == device.bytes + [0, 0, 0, 0, 0, 0, 0, 42, MessageEntry.withdrawnFlag] + Projections.encodeNoEffect(why))
        let back = try MessageEntry.decode(withdrawn)
        #expect(back.withdrawn && back.device == device && back.sent == 42 && back.edit == nil && back.deleted == nil && !back.purged)
        #expect(back.reason == why)
        #expect(throws: ProjectionError.self) { try MessageEntry.decode(Array(withdrawn.prefix(41))) }
        #expect(try MessageEntry.isWithdrawn(withdrawn))
        #expect(try !MessageEntry.isDeleted(withdrawn))
        #expect(try MessageEntry.send(of: withdrawn) == (device, 42))
        #expect(throws: ProjectionError.self) { try MessageEntry.decode(withdrawn + [0]) }
    }

    @Test("a chat row reads back whole with every combination of its last message's fields; a cut, a longer or an unknown row is damage")
    func chatRowEncoding() throws {
        var rng = SplitMix64(seed: 0xC4A7_0D)
        func key() -> Bytes32 { Bytes32((0..<32).map { _ in UInt8(truncatingIfNeeded: rng.next()) })! }
        func bytes(_ n: Int) -> [UInt8] { (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) } }
        let id = ChatID(key())
        for combination in 0..<256 {
            let members = (0..<(combination % 5)).map { i in MemberView(user: UserID(key()), admin: i == 0, since: HLC(rawValue: rng.next())) }
            let title: [UInt8]? = combination % 3 == 0 ? nil : bytes(combination % 3 == 1 ? 0 : 90)
            let view = ChatView(
                id: id, sealedTitle: title, creator: UserID(key()), createdHLC: HLC(rawValue: rng.next()), createdBy: key(), members: members,
                messageCount: Int(rng.next() >> 2))
            var last: ChatRow.Last? = nil
            if combination & 128 == 0 {
                var record = MessageRecord(sender: key(), device: key(), hlc: HLC(rawValue: rng.next()))
                if combination & 1 != 0 { record.body = bytes(combination & 64 != 0 ? 0 : 120) }
                if combination & 2 != 0 { record.blob = key() }
                if combination & 4 != 0 { record.size = rng.next() }
                if combination & 8 != 0 { record.edited = HLC(rawValue: rng.next()) }
                if combination & 16 != 0 { record.editor = key() }
                if combination & 32 != 0 { record.deleted = HLC(rawValue: rng.next()) }
                record.purged = combination & 64 != 0
                last = ChatRow.Last(id: key(), record: record)
            }
            let row = ChatRow(chat: view, creatorDevice: key(), last: last)
            let encoded = row.encoded()
            #expect(try encoded.withUnsafeBytes { try ChatRow.decode($0, chat: id) } == row)
            let creation = try encoded.withUnsafeBytes { try ChatRow.creation(in: $0) }
            #expect(creation.createdBy == view.createdBy && creation.device == row.creatorDevice)
            #expect(throws: ProjectionError.self) { try Array(encoded.dropLast()).withUnsafeBytes { try ChatRow.decode($0, chat: id) } }
            #expect(throws: ProjectionError.self) { try (encoded + [0]).withUnsafeBytes { try ChatRow.decode($0, chat: id) } }
            var otherLayout = encoded
            otherLayout[0] = 2
            #expect(throws: ProjectionError.self) { try otherLayout.withUnsafeBytes { try ChatRow.decode($0, chat: id) } }
        }
    }

    @Test("a member's chat activity entry reads back its activity, last message, unread count and read marker, with and without each")
    func chatActivityEntryEncoding() throws {
        var rng = SplitMix64(seed: 0xAC71)
        func key() -> Bytes32 { Bytes32((0..<32).map { _ in UInt8(truncatingIfNeeded: rng.next()) })! }
        for combination in 0..<4 {
            let last = combination & 1 == 0 ? nil : ChatActivity.Last(hlc: HLC(rawValue: rng.next()), message: key(), device: key())
            let marker = combination & 2 == 0 ? nil : ReadMarker(message: MessageID(key()), hlc: HLC(rawValue: rng.next()))
            let activity = ChatActivity(activity: HLC(rawValue: rng.next()), last: last)
            for unread in [0, 7, ChatSummary.unreadLimit, ChatSummary.unreadLimit + 5] {
                let encoded = activity.encoded(unread: unread, marker: marker)
                #expect(encoded.count == 9 + (last == nil ? 0 : 72) + (marker == nil ? 0 : 40))
                let back = try #require(encoded.withUnsafeBytes { ChatActivity.LastKey.read($0) })
                #expect(back.activity == activity.activity && back.unread == min(unread, ChatSummary.unreadLimit) && back.marker == marker)
                #expect(back.last?.hlc == last?.hlc && back.last?.message == last?.message)
                #expect(encoded.dropLast().withUnsafeBytes { ChatActivity.LastKey.read(UnsafeRawBufferPointer($0)) } == nil)
            }
        }
    }

    /// The facts' two levels (Specs/projections.md §9.1): after every commit
    /// the recent level holds at most its target, each commit moves only the
    /// excess, from where the last move stopped (so the moves go round the
    /// key space), and every fact is read back, in key order, from whichever
    /// level holds it. The harness's target minimum is 6.
    @Test("facts move from the recent level to the main one a key range at a time")
    func factsMoveFromTheRecentLevelAKeyRangeAtATime() throws {
        let s = Scenario()
        let people = try (0..<4).map { _ in try s.person(devices: 1) }
        let r = try s.replica()
        func levels() throws -> (recent: [[UInt8]: [UInt8]], main: [[UInt8]: [UInt8]], merged: [UInt8]?) {
            try r.env.read { txn in
                var recent: [[UInt8]: [UInt8]] = [:]
                var main: [[UInt8]: [UInt8]] = [:]
                try txn.scan(r.projections.recentFacts) { key, value in
                    recent[key] = value
                    return true
                }
                try txn.scan(r.projections.facts) { key, value in
                    main[key] = value
                    return true
                }
                return (recent, main, try txn.get(r.projections.index, Projections.factsMergedKey))
            }
        }
        func sorted(_ keys: some Sequence<[UInt8]>) -> [[UInt8]] { keys.sorted { $0.lexicographicallyPrecedes($1) } }
        var wentRound = false
        var total = 0
        for round in 0..<40 {
            let events = try people.enumerated().map { i, p in
                try p.d1.sign(.profileSet, p.key, Payload.profile(.name, .text("n\(round).\(i)")), hlc: Scenario.at(UInt64(10 + round)))
            }
            let before = try levels()
            try r.deliver((round == 0 ? people.flatMap(\.bindings) : []) + events)
            let after = try levels()
            #expect(after.recent.count <= max(6, after.main.count / 8), "round \(round)")
            #expect(Set(after.recent.keys).isDisjoint(with: after.main.keys))
            // The recent level before the move: what it held, and this commit's facts.
            let held = Set(before.recent.keys).union(Set(after.recent.keys).union(after.main.keys).subtracting(before.main.keys))
            let candidates = sorted(held)
            let moved = Set(candidates.filter { after.recent[$0] == nil })
            // In key order from after the last move's key, round to the first key.
            let start = before.merged.map { m in candidates.firstIndex { m.lexicographicallyPrecedes($0) } ?? candidates.count } ?? 0
            let cycle = Array(candidates[start...] + candidates[..<start])
            #expect(moved == Set(cycle.prefix(moved.count)), "round \(round)")
            if !moved.isEmpty {
                #expect(after.merged == cycle[moved.count - 1])
                if let m = before.merged, moved.contains(where: { $0.lexicographicallyPrecedes(m) }) { wentRound = true }
            }
            // Every fact is read back once, in key order, with its value.
            let filed = after.main.merging(after.recent) { $1 }
            var read: [(key: [UInt8], value: [UInt8])] = []
            try r.env.read { txn in
                for cls in ObjectClass.allCases {
                    try r.projections.scanFacts(prefix: [cls.rawValue], in: txn) { key, value in
                        read.append((key, value))
                        return true
                    }
                }
            }
            #expect(read.map(\.key) == sorted(filed.keys))
            #expect(read.allSatisfy { filed[$0.key] == $0.value })
            total = filed.count
        }
        #expect(total > 100)
        #expect(wentRound)
    }

    @Test("a fact's value names the header object only when it is not the object filed under (coins)")
    func factValuesLeaveOutTheirObject() throws {
        let s = Scenario()
        let alice = try s.person(devices: 1)
        let profile = try alice.d1.sign(.profileSet, alice.key, Payload.profile(.name, .text("Alice")), hlc: Scenario.at(10))
        let credit = try s.issuer.sign(
            .coinCredited, alice.d1.publicKey, Payload.credit(user: alice.key, amount: 10, receipt: "r-1"), hlc: Scenario.at(11))
        let r = try s.fold(alice.bindings + [profile, credit])
        let facts: [(key: [UInt8], value: [UInt8], fact: Fact)] = try r.env.read { txn in
            var out: [([UInt8], [UInt8], Fact)] = []
            for level in [r.projections.facts, r.projections.recentFacts] {
                try txn.scan(level) { key, value in
                    out.append((key, value, try Fact.load(key: key, value: value, log: r.projections.log, in: txn)))
                    return true
                }
            }
            return out
        }
        let byID = Dictionary(facts.map { ($0.fact.id, $0) }, uniquingKeysWith: { a, _ in a })
        let p = try #require(byID[profile.id])
        #expect(p.value.count == 9 && p.fact.object == alice.key && Fact.arrival(ofValue: p.value) == p.fact.arrival)
        let c = try #require(byID[credit.id])
        #expect(c.value.count == 41 && c.fact.object == alice.d1.publicKey && Fact.arrival(ofValue: c.value) == c.fact.arrival)
        #expect(Array(c.value[1..<33]) == alice.d1.publicKey.bytes)
        #expect(p.fact.payload == profile.payload && c.fact.payload == credit.payload)
        try r.env.read { txn in
            for bad in [Array(p.value.dropLast()), p.value + [0], [200] + Array(p.value.dropFirst())] {
                #expect(throws: ProjectionError.self) { try Fact.load(key: p.key, value: bad, log: r.projections.log, in: txn) }
            }
        }
    }

    @Test("the state keeps a message as a reference to the log: no copy of the sealed body, the same record read back")
    func messageEntryReferencesTheLog() throws {
        let s = Scenario()
        let alice = try s.person(devices: 1)
        let chat = alice.d1.createdID(s.rng.bytes(16))
        let create = try alice.d1.sign(.chatCreated, chat, Payload.chatCreated(members: []), hlc: Scenario.at(10))
        let plain = try alice.d1.sign(.messageSent, chat, Payload.message(text: "a long enough first message"), hlc: Scenario.at(11))
        let edited = try alice.d1.sign(.messageSent, chat, Payload.message(text: "a long enough second message"), hlc: Scenario.at(12))
        let edit = try alice.d1.sign(.messageEdited, edited.id, Payload.edit(chat: chat, text: "the second message, edited"), hlc: Scenario.at(13))
        let r = try s.fold(alice.bindings + [create, plain, edited, edit])
        let raw: [[UInt8]] = try r.env.read { txn in
            var out: [[UInt8]] = []
            try txn.scan(r.projections.state, prefix: Table.message.key(chat.bytes)) { _, value in
                out.append(value)
                return true
            }
            return out
        }
        #expect(raw.count == 2)
        let bodies = [plain, edited, edit].compactMap { $0.payload?[text: "body"]?.bytesValue }
        #expect(bodies.count == 3)
        for value in raw {
            #expect(value.count <= 73 + 48, "a stored message entry of \(value.count) bytes")
            for body in bodies { #expect(!contains(value, body.prefix(16)), "the state copies a sealed body") }
        }
        let messages = try r.projections.chat(chat).messages
        #expect(messages.map(\.body) == [bodies[0], bodies[2]])
        #expect(messages.last?.edited == edit.hlc && messages.last?.editor?.raw == edit.author)
        // The state the digest covers holds the records of Specs/projections.md §5.
        let lines = try r.stateLines().filter { $0.hasPrefix("53") }
        #expect(lines.count == 2)
        #expect(lines.allSatisfy { line in bodies.contains { line.contains(Hex.encode($0)) } })
    }

    @Test("message payloads and memberships read in place give what the long way gives, and leave other layouts to it")
    func inPlaceReadersAgreeWithTheLongWay() throws {
        var rng = SplitMix64(seed: 0x1A_91AC_E)
        func bytes(_ n: Int) -> [UInt8] { (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) } }
        func longSent(_ raw: [UInt8]) -> MessageSentPayload? { try? MessageSentPayload(reading: try CBORDecoder.decode(raw)) }
        let sizes: [UInt64] = [0, 23, 24, 65_536, .max]
        var canonical = 0
        for combination in 0..<(1 << 5) {
            func has(_ bit: Int) -> Bool { combination & (1 << bit) != 0 }
            var map: [(String, CBORValue)] = []
            if has(0) { map.append(("body", .bytes(bytes([0, 23, 24, 300][combination % 4])))) }
            // A 31-byte blob breaks the schema; the long way reads no parts.
            if has(1) { map.append(("blob", .bytes(bytes(has(4) ? 31 : 32)))) }
            if has(2) { map.append(("size", .unsigned(sizes[combination % sizes.count]))) }
            if has(3) { map.append(("zzzz", .unsigned(1))) }  // a field of a newer version
            let raw = CBOREncoder.encode(.textMap(map))
            let fast = MessageSentPayload.readCanonical(raw)
            if fast != nil { canonical += 1 }
            let read = try MessageRecord.sentPayload(raw, at: 1)
            #expect(read?.body == longSent(raw)?.body && read?.blob == longSent(raw)?.blob && read?.size == longSent(raw)?.size, "\(combination)")
            if let fast { #expect(fast.body == read?.body && fast.blob == read?.blob && fast.size == read?.size) }
            if has(3) || (has(1) && has(4)) { #expect(fast == nil, "\(combination): only the canonical layout is read in place") }
        }
        #expect(canonical >= 4)
        // A non-canonical head (a body length in two bytes where one does)
        // goes the long way, which refuses it as damage, as the log never
        // holds one (Specs/events.md §2).
        let long = [0xA1, 0x64] + Array("body".utf8) + [0x59, 0x00, 0x02, 7, 8]
        #expect(MessageSentPayload.readCanonical(long) == nil)
        #expect(throws: ProjectionError.self) { try MessageRecord.sentPayload(long, at: 1) }
        // An edit: canonical, with a field of a newer version, and not an edit at all.
        let chat = bytes(32)
        let edit = CBOREncoder.encode(.textMap([("chat", .bytes(chat)), ("body", .bytes([1, 2, 3]))]))
        #expect(try MessageRecord.editedBody(edit, at: 1) == [1, 2, 3])
        let newer = CBOREncoder.encode(.textMap([("chat", .bytes(chat)), ("body", .bytes([4])), ("zzzz", .null)]))
        #expect(try MessageRecord.editedBody(newer, at: 1) == (try? MessageEditedPayload(reading: try CBORDecoder.decode(newer)))?.body)
        #expect(try MessageRecord.editedBody(CBOREncoder.encode(.textMap([("body", .bytes([4]))])), at: 1) == nil)
        #expect(throws: (any Error).self) { try MessageRecord.editedBody([0xFF], at: 1) }

        // Memberships: the current one's flag and start, as the whole decode says.
        for intervals in [[(HLC(rawValue: 5), HLC?.none)], [(HLC(rawValue: 5), HLC(rawValue: 9))],
                          [(HLC(rawValue: 1), HLC(rawValue: 2)), (HLC(rawValue: 300), nil)], []] {
            for admin in [false, true] {
                let m = Membership(admin: admin, intervals: intervals)
                let current = try Membership.current(m.encoded())
                #expect(current?.admin == (m.isCurrent ? admin : nil))
                #expect(current?.since == (m.isCurrent ? intervals.last?.0 : nil))
            }
        }
    }

    private func contains(_ haystack: [UInt8], _ needle: ArraySlice<UInt8>) -> Bool {
        guard needle.count <= haystack.count else { return false }
        return (0...(haystack.count - needle.count)).contains { haystack[$0..<$0 + needle.count].elementsEqual(needle) }
    }
}
