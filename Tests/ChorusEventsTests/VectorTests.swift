import ChorusCBOR
import ChorusCrypto
@testable import ChorusEvents
import ChorusTestSupport
import Foundation
import Testing

typealias ValidVector = ValidEventVector
typealias InvalidVector = InvalidEventVector
typealias VectorFile = EventVectorFile

extension ValidEventVector: CustomTestStringConvertible {
    public var testDescription: String { name }
}

extension InvalidEventVector: CustomTestStringConvertible {
    public var testDescription: String { "\(name) → \(error)" }
}

@Suite("Event vectors (Specs/vectors/events.json)")
struct EventVectorTests {
    @Test func signingContextMatchesSpec() throws {
        #expect(Event.signingContext == hex(try VectorFile.load().signing_context_hex))
    }

    @Test("signing reproduces header, signature, id and envelope byte for byte", arguments: try VectorFile.load().valid)
    func signingReproducesVector(_ v: ValidVector) throws {
        let key = try #require(SigningKey(seed: hex(v.author_seed)))
        #expect(key.publicKey.hex == v.author)
        let kind = EventKind(code: v.kind_code)
        #expect(kind.name == v.kind)
        let payload = try CBORDecoder.decode(hex(v.payload_hex))
        let prev = v.prev.map { Bytes32(hex: $0)! }, object = Bytes32(hex: v.object)!
        let event = kind.isKnown
            ? try Event.sign(with: key, seq: v.seq, prev: prev, hlc: HLC(rawValue: v.hlc), kind: kind, object: object, payload: payload)
            : try UnsignedEvent.ofUnknownKind(
                v.kind_code, author: key.publicKey, seq: v.seq, prev: prev, hlc: HLC(rawValue: v.hlc), object: object, payload: payload
            ).signed(with: key)
        #expect(event.headerBytes == hex(v.header_hex))
        #expect(Event.signedMessage(headerBytes: event.headerBytes) == hex(v.signed_message_hex))
        #expect(event.signature == hex(v.signature_hex))
        #expect(event.id.hex == v.id)
        #expect(event.header.payloadHash.hex == v.payload_hash)
        #expect(event.payloadBytes == hex(v.payload_hex))
        let envelope = v.payload_present ? event.encoded() : event.purged().encoded()
        #expect(envelope == hex(v.envelope_hex))
    }

    @Test("decoding the envelope recovers every field and the signature verifies", arguments: try VectorFile.load().valid)
    func decodingRecoversVector(_ v: ValidVector) throws {
        let event = try Event.decode(hex(v.envelope_hex))
        #expect(event.verifySignature())
        #expect(event.id.hex == v.id)
        #expect(event.author.hex == v.author)
        #expect(event.seq == v.seq)
        #expect(event.header.prev?.hex == v.prev)
        #expect(event.hlc.rawValue == v.hlc)
        #expect(event.kind.name == v.kind)
        #expect(event.object.hex == v.object)
        #expect(event.payloadBytes == (v.payload_present ? hex(v.payload_hex) : nil))
        #expect(event.encoded() == hex(v.envelope_hex))
        // The payload decoded for the schema check is the one the fold reads,
        // and an event is the same whether it holds that copy or not.
        #expect(event.payload == (v.payload_present ? try CBORDecoder.decode(hex(v.payload_hex)) : nil))
        let unheld = Event(header: event.header, headerBytes: event.headerBytes, signature: event.signature, payloadBytes: event.payloadBytes)
        #expect(unheld == event && unheld.hashValue == event.hashValue && unheld.payload == event.payload)
        #expect(event.purged().payload == nil)
    }

    @Test("every known kind's typed payload reads the vector and builds the same bytes", arguments: try VectorFile.load().valid)
    func typedPayloadRoundTrip(_ v: ValidVector) throws {
        let kind = EventKind(code: v.kind_code)
        guard let type = kind.payloadType else {
            #expect(!kind.isKnown)
            return
        }
        #expect(type.kind == kind)
        let payload = try CBORDecoder.decode(hex(v.payload_hex))
        let typed = try type.init(reading: payload)
        #expect(CBOREncoder.encode(typed.cbor) == hex(v.payload_hex))
    }

    @Test func everyKnownKindHasATypedPayloadOfItsOwn() {
        for kind in EventKind.known {
            #expect(kind.payloadType?.kind == kind, "\(kind.name)")
            #expect(EventKind(code: kind.code) == kind && EventKind(name: kind.name) == kind)
        }
        #expect(Set(EventKind.known.map(\.code)).count == EventKind.known.count)
        // Raise this with the table of Specs/events.md §6 when adding a kind.
        #expect(EventKind.known.count == 29)
    }

    @Test("damaged events are refused with the specific error", arguments: try VectorFile.load().invalid.filter(\.decode_error))
    func decodeLevelRefusal(_ v: InvalidVector) {
        do {
            let event = try Event.decode(hex(v.envelope_hex))
            Issue.record("decoded \(event.id.hex), expected \(v.error)")
        } catch {
            #expect(error.code == v.error, "\(error)")
        }
    }

    @Test("bad signatures decode but do not verify", arguments: try VectorFile.load().invalid.filter { $0.error == "bad_signature" })
    func signatureRefusal(_ v: InvalidVector) throws {
        let event = try Event.decode(hex(v.envelope_hex))
        #expect(!event.verifySignature())
    }
}

@Suite("Hybrid logical clock")
struct HLCTests {
    @Test func packsPhysicalAndLogical() {
        let t = HLC(physicalMillis: 1_700_000_000_000, logical: 7)
        #expect(t.rawValue == 1_700_000_000_000 << 16 | 7)
        #expect(t.physicalMillis == 1_700_000_000_000)
        #expect(t.logical == 7)
        #expect(t.description == "2023-11-14T22:13:20.000Z+7")
    }

    @Test func neverRunsBackwards() {
        var clock = HybridClock()
        let a = clock.tick(nowMillis: 1000)
        let b = clock.tick(nowMillis: 1000)
        let c = clock.tick(nowMillis: 900)  // wall clock stepped back
        #expect(a < b && b < c)
        #expect(c.physicalMillis == 1000 && c.logical == 2)
        clock.observe(HLC(physicalMillis: 5000, logical: 3))
        let d = clock.tick(nowMillis: 1001)
        #expect(d == HLC(physicalMillis: 5000, logical: 4))
        #expect(clock.tick(nowMillis: 6000) == HLC(physicalMillis: 6000, logical: 0))
    }

    @Test func logicalOverflowCarriesIntoPhysical() {
        var clock = HybridClock(last: HLC(physicalMillis: 10, logical: .max))
        #expect(clock.tick(nowMillis: 10) == HLC(physicalMillis: 11, logical: 0))
    }
}

@Suite("Payload schemas")
struct SchemaTests {
    let key = SigningKey(seed: [UInt8](repeating: 7, count: 32))!
    let object = Bytes32([UInt8](repeating: 1, count: 32))!

    func sign(_ kind: EventKind, _ payload: CBORValue) throws(EventError) -> Event {
        try Event.sign(with: key, seq: 1, prev: nil, hlc: HLC(rawValue: 1 << 16), kind: kind, object: object, payload: payload)
    }

    func expectViolation(_ kind: EventKind, _ payload: CBORValue, _ fragment: String) {
        do {
            _ = try sign(kind, payload)
            Issue.record("accepted \(kind.name) \(payload)")
        } catch {
            #expect(error.code == "schema_violation")
            #expect(error.description.contains(fragment), "\(error)")
        }
    }

    /// The payload of a stored envelope read in place (the store's
    /// bytes) is the one read from a copy: present, purged, or refused
    /// when the bytes are cut short.
    @Test func storedPayloadInPlaceEqualsTheCopy() throws {
        let event = try sign(.messageSent, .textMap([("body", .bytes([UInt8](repeating: 3, count: 100)))]))
        for envelope in [event.encoded(), event.purged().encoded()] {
            let copied = try Event.storedPayload(ofEnvelope: envelope)
            let inPlace = try envelope.withUnsafeBytes { raw in try Event.storedPayload(ofEnvelope: raw) }
            #expect(inPlace == copied)
        }
        #expect(try Event.storedPayload(ofEnvelope: event.encoded()) == event.payloadBytes)
        #expect(try Event.storedPayload(ofEnvelope: event.purged().encoded()) == nil)
        // Its id, hashed in place, whether the payload is there or purged.
        for envelope in [event.encoded(), event.purged().encoded()] {
            #expect(try envelope.withUnsafeBytes { raw in try Event.storedID(ofEnvelope: raw) } == event.id)
        }
        let cut = Array(event.encoded().dropLast(10))
        #expect(throws: EventError.self) {
            try cut.withUnsafeBytes { raw in _ = try Event.storedPayload(ofEnvelope: raw) }
        }
    }

    @Test func everyKindHasASchemaAndANameThatRoundTrips() {
        for kind in EventKind.known {
            #expect(EventKind(name: kind.name) == kind)
            _ = kind.schema
        }
        #expect(Set(EventKind.known.map(\.name)).count == EventKind.known.count)
    }

    @Test func profileValueTypeDependsOnField() throws {
        _ = try sign(.profileSet, .textMap([("field", .text("birthday")), ("value", .text("2000-02-29"))]))
        _ = try sign(.profileSet, .textMap([("field", .text("avatar")), ("value", .bytes(object.bytes))]))
        _ = try sign(.profileSet, .textMap([("field", .text("avatar")), ("value", .null)]))
        expectViolation(.profileSet, .textMap([("field", .text("birthday")), ("value", .text("1900-02-29"))]), "date")
        expectViolation(.profileSet, .textMap([("field", .text("avatar")), ("value", .text("me.jpg"))]), "32-byte")
        expectViolation(.profileSet, .textMap([("field", .text("visibility")), ("value", .text("everyone"))]), "one of")
        expectViolation(.profileSet, .textMap([("field", .text("shoe")), ("value", .text("42"))]), "field must be one of")
        expectViolation(.profileSet, .textMap([("field", .text("name"))]), "missing required field \"value\"")
    }

    @Test func boundsAreEnforced() throws {
        _ = try sign(.messageSent, .textMap([("body", .bytes([UInt8](repeating: 1, count: 4608)))]))
        expectViolation(.messageSent, .textMap([("body", .bytes([UInt8](repeating: 1, count: 4609)))]), "72...4608 bytes")
        expectViolation(.messageSent, .textMap([("body", .bytes([UInt8](repeating: 1, count: 71)))]), "72...4608 bytes")
        expectViolation(
            .messageSent, .textMap([("body", .bytes([UInt8](repeating: 1, count: 72))), ("blob", .bytes(object.bytes))]),
            "blob and size together")
        let wrap = { (device: UInt8) in [UInt8](repeating: device, count: 32) + [UInt8](repeating: 0, count: 48) }
        _ = try sign(.chatKey, .textMap([("epoch", .bytes(object.bytes)), ("wraps", .bytes(wrap(1) + wrap(2))), ("ephemeral", .bytes(object.bytes))]))
        expectViolation(
            .chatKey, .textMap([("epoch", .bytes(object.bytes)), ("wraps", .bytes(wrap(2) + wrap(1))), ("ephemeral", .bytes(object.bytes))]),
            "strictly increasing")
        expectViolation(
            .chatKey, .textMap([("epoch", .bytes(object.bytes)), ("wraps", .bytes(wrap(1) + [0])), ("ephemeral", .bytes(object.bytes))]),
            "whole 80-byte wraps")
        expectViolation(.coinSpent, .textMap([("amount", .unsigned(0)), ("for", .text("x"))]), "amount must be in")
        expectViolation(.followRemoved, .textMap([("seen", .array([]))]), "1...1024 items")
        expectViolation(.followRemoved, .textMap([("seen", .array([.bytes(object.bytes), .bytes(object.bytes)]))]), "repeat")
        expectViolation(.slotSet, .textMap([("slot", .unsigned(64)), ("picture", .null)]), "slot must be in 0...63")
        expectViolation(.pictureDeleted, .textMap([("why", .text("x"))]), "unknown field")
        expectViolation(.pictureDeleted, .array([]), "payload must be a map")
    }
}

/// The header reader every fold and sync goes through
/// (`EventHeader.decodeCanonical`) against the checked decoder it stands
/// in front of: whatever the fast reader accepts, the checked decoder must
/// accept with the same result, or a malformed header would get in by the
/// fast path.
@Suite("Event headers: the canonical fast path agrees with the checked decoder")
struct HeaderFastPathTests {
    /// The header bytes inside an envelope, or nil when it does not parse.
    static func headerBytes(_ envelope: [UInt8]) -> [UInt8]? {
        guard let value = try? CBORDecoder.decode(envelope), let items = value.arrayValue, items.count == 3 else { return nil }
        return items[0].bytesValue
    }

    static func agree(_ bytes: [UInt8]) -> String? {
        let checked = try? EventHeader.decodeChecked(bytes)
        guard let fast = EventHeader.decodeCanonical(bytes) else { return nil }
        return fast == checked ? nil : "fast path read \(fast), checked decoder \(checked.map { "\($0)" } ?? "refused") for \(bytes)"
    }

    @Test("every vector's header: the fast path reads each valid one, and never reads what the checked decoder refuses")
    func vectors() throws {
        let file = try VectorFile.load()
        for v in file.valid {
            let bytes = try #require(Self.headerBytes(hex(v.envelope_hex)))
            #expect(EventHeader.decodeCanonical(bytes) != nil, "\(v.name): the fast path must read a valid header")
            #expect(Self.agree(bytes) == nil, "\(v.name)")
        }
        for v in file.invalid {
            guard let bytes = Self.headerBytes(hex(v.envelope_hex)) else { continue }
            #expect(Self.agree(bytes) == nil, "\(v.name)")
        }
    }

    @Test("20,000 seeded mutations of valid headers (flipped, inserted, removed bytes): the two readers agree on each")
    func mutations() throws {
        let headers = try VectorFile.load().valid.compactMap { Self.headerBytes(hex($0.envelope_hex)) }
        var rng = SplitMix64(seed: 0x4EAD_E125)
        var readByBoth = 0
        for round in 0..<20_000 {
            var bytes = headers[round % headers.count]
            for _ in 0...Int.random(in: 0...2, using: &rng) {
                switch Int.random(in: 0...3, using: &rng) {
                case 0: bytes[Int.random(in: 0...(bytes.count - 1), using: &rng)] ^= UInt8(1 << Int.random(in: 0...7, using: &rng))
                case 1: bytes[Int.random(in: 0...(bytes.count - 1), using: &rng)] = UInt8(Int.random(in: 0...255, using: &rng))
                case 2: bytes.insert(UInt8(Int.random(in: 0...255, using: &rng)), at: Int.random(in: 0...bytes.count, using: &rng))
                default: if bytes.count > 1 { bytes.remove(at: Int.random(in: 0...(bytes.count - 1), using: &rng)) }
                }
            }
            if let problem = Self.agree(bytes) {
                Issue.record("round \(round): \(problem)")
                return
            }
            if EventHeader.decodeCanonical(bytes) != nil { readByBoth += 1 }
        }
        // Mutations inside the 32-byte fields leave valid headers: the fast
        // path must have been exercised, not only refused everything.
        #expect(readByBoth > 1_000)
    }
}
