import ChorusCBOR
import ChorusCrypto

/// The signed header of an event (Specs/events.md §3.2).
package struct EventHeader: Hashable, Sendable {
    /// The header format version this node writes and reads (header key 0);
    /// a header with any other version is refused with `unsupportedVersion`.
    package static let formatVersion: UInt64 = 1

    /// Header key 0: the format version; always `formatVersion` in a decoded header.
    package var version: UInt64
    /// Header key 1: the Ed25519 package key that signs the header. Any 32 bytes decode;
    /// an unusable key only fails signature verification (Specs/events.md §5).
    package var author: PublicKey
    /// Header key 2: the event's position in its author's feed, starting at 1.
    package var seq: UInt64
    /// The id of the author's event `seq - 1`; nil exactly when `seq == 1`.
    package var prev: EventID?
    /// Header key 4: the hybrid logical clock timestamp (Specs/events.md §4); positive,
    /// and strictly increasing within a feed.
    package var hlc: HLC
    /// Header key 5: what the event does. A code this node does not know decodes as
    /// `.unknown(code)` (Specs/events.md §6.3).
    package var kind: EventKind
    /// Header key 6: the 32-byte id of the thing the event is about; its meaning depends
    /// on the kind (Specs/events.md §6).
    package var object: ObjectID
    /// Header key 7: BLAKE2b-256 of the payload bytes. It stays in the signed header
    /// after a purge, so a refilled payload can still be checked.
    package var payloadHash: Hash32
    /// Header key 8: the payload's length in bytes, at most `EventLimits.maxPayloadBytes`.
    package var payloadLength: UInt64

    enum Key: UInt64 {
        case version = 0, author, seq, prev, hlc, kind, object, payloadHash, payloadLength
    }

    /// The header's deterministic CBOR encoding: a map of 9 entries keyed 0...8
    /// (Specs/events.md §3.2). These bytes are what the author signs and what the id hashes.
    package func encoded() -> [UInt8] {
        CBOREncoder.encode(
            .map([
                CBORMapEntry(.unsigned(Key.version.rawValue), .unsigned(version)),
                CBORMapEntry(.unsigned(Key.author.rawValue), .bytes(author.bytes)),
                CBORMapEntry(.unsigned(Key.seq.rawValue), .unsigned(seq)),
                CBORMapEntry(.unsigned(Key.prev.rawValue), prev.map { .bytes($0.bytes) } ?? .null),
                CBORMapEntry(.unsigned(Key.hlc.rawValue), .unsigned(hlc.rawValue)),
                CBORMapEntry(.unsigned(Key.kind.rawValue), .unsigned(kind.code)),
                CBORMapEntry(.unsigned(Key.object.rawValue), .bytes(object.bytes)),
                CBORMapEntry(.unsigned(Key.payloadHash.rawValue), .bytes(payloadHash.bytes)),
                CBORMapEntry(.unsigned(Key.payloadLength.rawValue), .unsigned(payloadLength)),
            ]))
    }

    /// Parses header bytes and checks their fields in the order of Specs/events.md §7.1
    /// (checks 6–19). Throws `headerTooLarge`, a CBOR error, `malformedHeader`,
    /// `unsupportedVersion` or `payloadTooLarge`; an unknown kind code is accepted.
    package static func decode(_ bytes: [UInt8]) throws(EventError) -> EventHeader {
        if bytes.count > EventLimits.maxHeaderBytes { throw .headerTooLarge(size: bytes.count) }
        if let header = decodeCanonical(bytes) { return header }
        return try decodeChecked(bytes)
    }

    /// The header of bytes in exactly the canonical form every valid header
    /// has (Specs/events.md §3.2), read field by field without building a
    /// CBOR tree: every event a fold, a sync or a verification reads goes
    /// through here. nil for anything else; `decodeChecked` then decides and
    /// names the error. What this accepts, `decodeChecked` accepts with the
    /// same result (the event tests check both on every vector and on
    /// seeded mutations of them).
    static func decodeCanonical(_ bytes: [UInt8]) -> EventHeader? {
        bytes.withUnsafeBufferPointer { b -> EventHeader? in
            var i = 0
            /// An unsigned integer in its shortest form, under key `key`.
            func unsigned(key: UInt8) -> UInt64? {
                guard i + 2 <= b.count, b[i] == key else { return nil }
                let first = b[i + 1]
                i += 2
                guard first >> 5 == 0 else { return nil }
                let info = first & 0x1f
                let width: Int
                let minimum: UInt64
                switch info {
                case 0..<24: return UInt64(info)
                case 24: (width, minimum) = (1, 24)
                case 25: (width, minimum) = (2, 0x100)
                case 26: (width, minimum) = (4, 0x1_0000)
                case 27: (width, minimum) = (8, 0x1_0000_0000)
                default: return nil
                }
                guard i + width <= b.count else { return nil }
                var n: UInt64 = 0
                for k in 0..<width { n = n << 8 | UInt64(b[i + k]) }
                i += width
                return n >= minimum ? n : nil
            }
            /// A 32-byte byte string under key `key`.
            func bytes32(key: UInt8) -> Bytes32? {
                guard i + 35 <= b.count, b[i] == key, b[i + 1] == 0x58, b[i + 2] == 0x20 else { return nil }
                defer { i += 35 }
                return Bytes32(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: b[(i + 3)..<(i + 35)])))
            }
            guard b.count > 0, b[0] == 0xa9 else { return nil }
            i = 1
            guard let version = unsigned(key: 0), version == formatVersion,
                let author = bytes32(key: 1),
                let seq = unsigned(key: 2), seq >= 1
            else { return nil }
            let prev: EventID?
            if seq == 1 {
                guard i + 2 <= b.count, b[i] == 3, b[i + 1] == 0xf6 else { return nil }
                i += 2
                prev = nil
            } else {
                guard let p = bytes32(key: 3) else { return nil }
                prev = p
            }
            guard let hlc = unsigned(key: 4), hlc > 0,
                let kindCode = unsigned(key: 5),
                let object = bytes32(key: 6),
                let hash = bytes32(key: 7),
                let length = unsigned(key: 8), length <= UInt64(EventLimits.maxPayloadBytes),
                i == b.count
            else { return nil }
            return EventHeader(
                version: version, author: author, seq: seq, prev: prev, hlc: HLC(rawValue: hlc), kind: EventKind(code: kindCode),
                object: object, payloadHash: hash, payloadLength: length)
        }
    }

    /// `decode` through the generic CBOR decoder, checking the fields in
    /// the order of Specs/events.md §7.1 and naming the first problem.
    static func decodeChecked(_ bytes: [UInt8]) throws(EventError) -> EventHeader {
        let value: CBORValue
        do { value = try CBORDecoder.decode(bytes) } catch { throw .cbor(error, part: "header") }
        guard let entries = value.mapEntries else { throw .malformedHeader("header must be a map") }
        guard entries.count == 9 else { throw .malformedHeader("header must have exactly 9 fields, has \(entries.count)") }
        for (index, entry) in entries.enumerated() where entry.key != .unsigned(UInt64(index)) {
            throw .malformedHeader("header keys must be the integers 0...8")
        }
        let f = entries.map(\.value)

        guard let version = f[0].unsignedValue else { throw .malformedHeader("version must be an unsigned integer") }
        guard version == formatVersion else { throw .unsupportedVersion(version) }
        guard let authorBytes = f[1].bytesValue, let author = Bytes32(authorBytes) else {
            throw .malformedHeader("author must be a 32-byte package key")
        }
        guard let seq = f[2].unsignedValue, seq >= 1 else { throw .malformedHeader("seq must be an integer >= 1") }
        let prev: EventID?
        if f[3].isNull {
            guard seq == 1 else { throw .malformedHeader("prev is null but seq is \(seq)") }
            prev = nil
        } else {
            guard let p = f[3].bytesValue, let id = Bytes32(p) else { throw .malformedHeader("prev must be a 32-byte id or null") }
            guard seq > 1 else { throw .malformedHeader("the first event of a feed must have prev null") }
            prev = id
        }
        guard let hlcRaw = f[4].unsignedValue, hlcRaw > 0 else { throw .malformedHeader("hlc must be a positive integer") }
        guard let kindCode = f[5].unsignedValue else { throw .malformedHeader("kind must be an unsigned integer") }
        // An unknown code is not an error: a newer node's kind is stored and
        // relayed (Specs/events.md §6.3).
        let kind = EventKind(code: kindCode)
        guard let objectBytes = f[6].bytesValue, let object = Bytes32(objectBytes) else {
            throw .malformedHeader("object must be a 32-byte id")
        }
        guard let hashBytes = f[7].bytesValue, let hash = Bytes32(hashBytes) else {
            throw .malformedHeader("payload hash must be 32 bytes")
        }
        guard let length = f[8].unsignedValue else { throw .malformedHeader("payload length must be an unsigned integer") }
        if length > UInt64(EventLimits.maxPayloadBytes) { throw .payloadTooLarge(size: length) }

        return EventHeader(
            version: version, author: author, seq: seq, prev: prev, hlc: HLC(rawValue: hlcRaw), kind: kind,
            object: object, payloadHash: hash, payloadLength: length)
    }
}

/// A whole signed event: header bytes, signature and (unless purged) payload
/// bytes, exactly as they travel and are stored (Specs/events.md §3).
package struct Event: Hashable, Sendable {
    /// The decoded header.
    package let header: EventHeader
    /// The exact header bytes carried in the envelope: the bytes that were signed
    /// and whose hash is `id`.
    package let headerBytes: [UInt8]
    /// The 64-byte Ed25519 signature over `Event.signedMessage(headerBytes:)`
    /// (Specs/events.md §5).
    package let signature: [UInt8]
    /// nil when the payload was purged (only for purgeable kinds).
    package let payloadBytes: [UInt8]?
    /// The event id: BLAKE2b-256 of `headerBytes` (Specs/events.md §3.3). Purging keeps it,
    /// and other events refer to this event by it.
    package let id: EventID
    /// `payloadBytes` as decoded for the schema check of an event decoded
    /// from an envelope, on the verifying cores: the writer's fold reads it
    /// without decoding it again. Not part of the event's identity (`==`).
    private let decodedPayload: CBORValue?

    /// Domain separation: a Chorus event signature can never be mistaken for
    /// a signature made for another purpose with the same key.
    package static let signingContext: [UInt8] = Array("chorus/event/v1".utf8) + [0]

    /// The signing key (header key 1), taken from `header`.
    package var author: PublicKey { header.author }
    /// The position in the author's feed (header key 2), taken from `header`.
    package var seq: UInt64 { header.seq }
    /// The event kind (header key 5), taken from `header`.
    package var kind: EventKind { header.kind }
    /// The timestamp (header key 4), taken from `header`.
    package var hlc: HLC { header.hlc }
    /// The id of what the event is about (header key 6), taken from `header`.
    package var object: ObjectID { header.object }

    /// The decoded payload; nil when purged. Decoding cannot fail: the bytes
    /// were checked when the event was built or decoded.
    package var payload: CBORValue? {
        decodedPayload ?? payloadBytes.flatMap { try? CBORDecoder.decode($0) }
    }

    /// Equal when their bytes are: the header, signature and payload (a
    /// decoded copy of the payload held or not).
    package static func == (a: Event, b: Event) -> Bool {
        a.id == b.id && a.headerBytes == b.headerBytes && a.signature == b.signature && a.payloadBytes == b.payloadBytes
    }

    /// Hashes the id alone: it is a hash of the header, so it spreads
    /// events as well as all their bytes would, and byte arrays hash a
    /// byte at a time. `==` compares the rest.
    package func hash(into hasher: inout Hasher) {
        hasher.combine(id)
    }

    /// The message an event signature covers: `signingContext` followed by the
    /// header bytes (Specs/events.md §5).
    package static func signedMessage(headerBytes: [UInt8]) -> [UInt8] { signingContext + headerBytes }

    /// The id is the hash of the header bytes alone: the header is what the
    /// author signs, so a feed's chain (each header names its predecessor's
    /// id) can be built before any signature exists, and signing runs on all
    /// cores. Any valid signature over the same header is the same event.
    package static func computeID(headerBytes: [UInt8]) -> EventID {
        Blake2b.hash256(headerBytes)
    }

    init(
        header: EventHeader, headerBytes: [UInt8], signature: [UInt8], payloadBytes: [UInt8]?, id: EventID? = nil,
        decodedPayload: CBORValue? = nil
    ) {
        self.header = header
        self.headerBytes = headerBytes
        self.signature = signature
        self.payloadBytes = payloadBytes
        self.id = id ?? Event.computeID(headerBytes: headerBytes)
        self.decodedPayload = payloadBytes == nil ? nil : decodedPayload
    }

    /// Builds and signs a new event, checking the payload against its schema first.
    package static func sign(
        with key: SigningKey, seq: UInt64, prev: EventID?, hlc: HLC, kind: EventKind, object: ObjectID,
        payload: CBORValue
    ) throws(EventError) -> Event {
        try UnsignedEvent(author: key.publicKey, seq: seq, prev: prev, hlc: hlc, kind: kind, object: object, payload: payload)
            .signed(with: key)
    }

    /// The envelope: a CBOR array `[header bytes, signature, payload bytes or null]`.
    package func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(headerBytes.count + 72 + (payloadBytes?.count ?? 0))
        CBOREncoder.appendHead(major: 4, argument: 3, to: &out)
        CBOREncoder.appendHead(major: 2, argument: UInt64(headerBytes.count), to: &out)
        out.append(contentsOf: headerBytes)
        CBOREncoder.appendHead(major: 2, argument: 64, to: &out)
        out.append(contentsOf: signature)
        if let payloadBytes {
            CBOREncoder.appendHead(major: 2, argument: UInt64(payloadBytes.count), to: &out)
            out.append(contentsOf: payloadBytes)
        } else {
            out.append(0xf6)
        }
        return out
    }

    /// This event's payload under another copy's signature: what a refill
    /// stores, so a purged event refilled from a copy whose signature was
    /// never checked keeps the signature the log verified (Specs/events.md §7.4).
    package func refilled(keeping stored: Event) -> Event {
        Event(
            header: header, headerBytes: headerBytes, signature: stored.signature, payloadBytes: payloadBytes, id: id,
            decodedPayload: decodedPayload)
    }

    /// The same event without its payload, as kept after a purge.
    package func purged() -> Event {
        Event(header: header, headerBytes: headerBytes, signature: signature, payloadBytes: nil, id: id)
    }

    /// Decodes an envelope and checks everything that does not need the
    /// author's key or the store: canonical encoding, header fields, sizes,
    /// payload length, hash and schema. Call `verifySignature()` next.
    package static func decode(_ bytes: [UInt8]) throws(EventError) -> Event {
        if bytes.count > EventLimits.maxEnvelopeBytes { throw .envelopeTooLarge(size: bytes.count) }
        let value: CBORValue
        do { value = try CBORDecoder.decode(bytes) } catch { throw .cbor(error, part: "envelope") }
        return try decode(envelope: value)
    }

    /// Decodes an envelope already parsed from a CBOR sequence. The event
    /// keeps the payload as decoded for its schema check (`payload`).
    package static func decode(envelope value: CBORValue) throws(EventError) -> Event {
        guard let items = value.arrayValue, items.count == 3 else {
            throw .malformedEnvelope("an event must be an array of [header, signature, payload]")
        }
        guard let headerBytes = items[0].bytesValue else { throw .malformedEnvelope("header must be a byte string") }
        guard let signature = items[1].bytesValue, signature.count == 64 else {
            throw .malformedEnvelope("signature must be a 64-byte byte string")
        }
        let header = try EventHeader.decode(headerBytes)
        let payloadBytes: [UInt8]?
        var decodedPayload: CBORValue? = nil
        if items[2].isNull {
            guard header.kind.payloadIsPurgeable else { throw .payloadMissing(kind: header.kind.name) }
            payloadBytes = nil
        } else {
            guard let p = items[2].bytesValue else { throw .malformedEnvelope("payload must be a byte string or null") }
            guard UInt64(p.count) == header.payloadLength else {
                throw .payloadLengthMismatch(declared: header.payloadLength, actual: p.count)
            }
            guard Blake2b.hash256(p) == header.payloadHash else { throw .payloadHashMismatch }
            let payload: CBORValue
            do { payload = try CBORDecoder.decode(p) } catch { throw .cbor(error, part: "payload") }
            if let problem = header.kind.schema?.violation(in: payload) {
                throw .schemaViolation(kind: header.kind.name, detail: problem)
            }
            payloadBytes = p
            decodedPayload = payload
        }
        return Event(header: header, headerBytes: headerBytes, signature: signature, payloadBytes: payloadBytes, decodedPayload: decodedPayload)
    }

    /// Strict Ed25519 verification of the header signature (Specs/events.md §5).
    package func verifySignature() -> Bool {
        Ed25519.verify(signature: signature, prefix: Event.signingContext, message: headerBytes, publicKey: header.author)
    }
}

/// An event whose header is complete but not yet signed. Its id is already
/// final, so the next event of the feed can chain to it.
package struct UnsignedEvent: Sendable {
    /// The complete header, as it will be signed.
    package let header: EventHeader
    /// The header's deterministic CBOR encoding: the bytes `signed(with:)` signs.
    package let headerBytes: [UInt8]
    /// The payload's deterministic CBOR encoding, at most `EventLimits.maxPayloadBytes`
    /// bytes; the header commits to its hash and length.
    package let payloadBytes: [UInt8]
    /// The event id (BLAKE2b-256 of `headerBytes`), final before signing.
    package let id: EventID

    /// Checks the payload against its kind's schema and builds the header.
    /// A node only writes kinds it knows.
    package init(
        author: PublicKey, seq: UInt64, prev: EventID?, hlc: HLC, kind: EventKind, object: ObjectID, payload: CBORValue
    ) throws(EventError) {
        guard let schema = kind.schema else { throw .schemaViolation(kind: kind.name, detail: "this node does not know the kind") }
        if let problem = schema.violation(in: payload) { throw .schemaViolation(kind: kind.name, detail: problem) }
        try self.init(unchecked: author, seq: seq, prev: prev, hlc: hlc, kind: kind, object: object, payload: payload)
    }

    /// An event of a kind this version does not know, as a newer node writes
    /// it (its payload need only be deterministic CBOR, Specs/events.md
    /// §6.3): for tests and tools that stand in for a newer node.
    package static func ofUnknownKind(
        _ code: UInt64, author: PublicKey, seq: UInt64, prev: EventID?, hlc: HLC, object: ObjectID, payload: CBORValue
    ) throws(EventError) -> UnsignedEvent {
        let kind = EventKind(code: code)
        guard !kind.isKnown else { throw .schemaViolation(kind: kind.name, detail: "the kind is known; build it with its schema") }
        return try UnsignedEvent(unchecked: author, seq: seq, prev: prev, hlc: hlc, kind: kind, object: object, payload: payload)
    }

    private init(
        unchecked author: PublicKey, seq: UInt64, prev: EventID?, hlc: HLC, kind: EventKind, object: ObjectID, payload: CBORValue
    ) throws(EventError) {
        let payloadBytes = CBOREncoder.encode(payload)
        if payloadBytes.count > EventLimits.maxPayloadBytes { throw .payloadTooLarge(size: UInt64(payloadBytes.count)) }
        guard seq >= 1, (seq == 1) == (prev == nil) else { throw .malformedHeader("prev must be nil exactly for seq 1") }
        guard hlc.rawValue > 0 else { throw .malformedHeader("hlc must be positive") }
        header = EventHeader(
            version: EventHeader.formatVersion, author: author, seq: seq, prev: prev, hlc: hlc, kind: kind,
            object: object, payloadHash: Blake2b.hash256(payloadBytes), payloadLength: UInt64(payloadBytes.count))
        headerBytes = header.encoded()
        self.payloadBytes = payloadBytes
        id = Event.computeID(headerBytes: headerBytes)
    }

    /// Signs with `key`, which must be the author's.
    package func signed(with key: SigningKey) -> Event {
        precondition(key.publicKey == header.author, "signing key is not the event's author")
        return Event(
            header: header, headerBytes: headerBytes, signature: key.sign(Event.signedMessage(headerBytes: headerBytes)),
            payloadBytes: payloadBytes, id: id)
    }
}

extension Event {
    /// The three items of an envelope this node stored itself, found by
    /// reading its CBOR heads without decoding or re-checking anything.
    /// Throws on bytes that are not shaped like an envelope.
    static func storedParts<Bytes: RandomAccessCollection<UInt8>>(
        _ bytes: Bytes
    ) throws(EventError) -> (header: Range<Int>, signature: Range<Int>, payload: Range<Int>?) where Bytes.Index == Int {
        var i = 0
        func head() throws(EventError) -> (major: UInt8, argument: Int) {
            guard i < bytes.count else { throw .malformedEnvelope("stored envelope is truncated") }
            let first = bytes[i]
            i += 1
            let info = first & 0x1f
            let width: Int
            switch info {
            case 0..<24: return (first >> 5, Int(info))
            case 24: width = 1
            case 25: width = 2
            case 26: width = 4
            default: throw .malformedEnvelope("stored envelope has an item of unexpected length")
            }
            guard i + width <= bytes.count else { throw .malformedEnvelope("stored envelope is truncated") }
            var n = 0
            for _ in 0..<width {
                n = n << 8 | Int(bytes[i])
                i += 1
            }
            return (first >> 5, n)
        }
        func byteString() throws(EventError) -> Range<Int> {
            let h = try head()
            guard h.major == 2, i + h.argument <= bytes.count else { throw .malformedEnvelope("stored envelope item is not a byte string") }
            defer { i += h.argument }
            return i..<(i + h.argument)
        }
        guard try head() == (4, 3) else { throw .malformedEnvelope("stored envelope is not a 3-item array") }
        let header = try byteString()
        let signature = try byteString()
        guard i < bytes.count else { throw .malformedEnvelope("stored envelope is truncated") }
        if bytes[i] == 0xf6 {
            guard i + 1 == bytes.count else { throw .malformedEnvelope("stored envelope has trailing bytes") }
            return (header, signature, nil)
        }
        let payload = try byteString()
        guard payload.upperBound == bytes.count else { throw .malformedEnvelope("stored envelope has trailing bytes") }
        return (header, signature, payload)
    }

    /// The payload bytes of an envelope this node stored itself (nil when
    /// purged): the projections read payloads this way, and
    /// `chorus-replay verify` re-checks every stored envelope in full.
    package static func storedPayload(ofEnvelope bytes: [UInt8]) throws(EventError) -> [UInt8]? {
        try storedParts(bytes).payload.map { Array(bytes[$0]) }
    }

    /// The id of an envelope this node stored itself, read where the store
    /// holds it: only the header bytes are hashed (a lookup by id checks
    /// the events its index lists this way, Specs/storage.md §3).
    package static func storedID(ofEnvelope bytes: UnsafeRawBufferPointer) throws(EventError) -> EventID {
        computeID(headerBytes: Array(UnsafeRawBufferPointer(rebasing: bytes[try storedParts(bytes).header])))
    }

    /// The same, from an envelope where the store holds it: only the
    /// payload is copied.
    package static func storedPayload(ofEnvelope bytes: UnsafeRawBufferPointer) throws(EventError) -> [UInt8]? {
        try storedParts(bytes).payload.map { Array(UnsafeRawBufferPointer(rebasing: bytes[$0])) }
    }

    /// The header and the payload bytes (nil when purged) of an envelope
    /// this node stored itself, read where the store holds it, for a fold
    /// that already knows the event's id: the id is not computed again, nor
    /// the signature copied.
    package static func storedHeaderAndPayload(
        ofEnvelope bytes: UnsafeRawBufferPointer
    ) throws(EventError) -> (header: EventHeader, payload: [UInt8]?) {
        let parts = try storedParts(bytes)
        let header = try EventHeader.decode(Array(UnsafeRawBufferPointer(rebasing: bytes[parts.header])))
        return (header, parts.payload.map { Array(UnsafeRawBufferPointer(rebasing: bytes[$0])) })
    }

    /// The header of an envelope this node stored itself, nothing else
    /// copied or checked (who wrote what, read from the log in bulk).
    package static func storedHeader(ofEnvelope bytes: UnsafeRawBufferPointer) throws(EventError) -> EventHeader {
        let parts = try storedParts(bytes)
        return try EventHeader.decode(Array(UnsafeRawBufferPointer(rebasing: bytes[parts.header])))
    }

    /// Decodes an envelope this node stored itself after checking it in
    /// full (`decode`) when it arrived: the header is parsed and the id
    /// computed, but the payload's hash and schema are not checked again
    /// (a whole-log fold reads every event this way; `chorus-replay verify`
    /// re-checks everything).
    package static func decodeStored(_ bytes: [UInt8]) throws(EventError) -> Event {
        try bytes.withUnsafeBytes { raw in Result { () throws(EventError) in try decodeStored(raw) } }.get()
    }

    /// `decodeStored` of an envelope where the store holds it.
    package static func decodeStored(_ bytes: UnsafeRawBufferPointer) throws(EventError) -> Event {
        try decodeStoredUnidentified(bytes).identified()
    }

    /// `decodeStored` but for the id, whose BLAKE2b hash of the header is
    /// most of the cost of reading a stored event: a reader of the log in
    /// arrival order takes it from the next event of the same feed (its
    /// `prev`) where it has one (`LogStore.forEachTrusted`).
    package static func decodeStoredUnidentified(_ bytes: UnsafeRawBufferPointer) throws(EventError) -> Unidentified {
        let parts = try storedParts(bytes)
        func copy(_ range: Range<Int>) -> [UInt8] { Array(UnsafeRawBufferPointer(rebasing: bytes[range])) }
        let headerBytes = copy(parts.header)
        guard parts.signature.count == 64 else { throw .malformedEnvelope("signature must be a 64-byte byte string") }
        return Unidentified(
            header: try EventHeader.decode(headerBytes), headerBytes: headerBytes, signature: copy(parts.signature),
            payloadBytes: parts.payload.map(copy))
    }

    /// A stored event decoded but for its id (`decodeStoredUnidentified`).
    package struct Unidentified: Sendable {
        /// The decoded header.
        package let header: EventHeader
        let headerBytes: [UInt8]
        let signature: [UInt8]
        let payloadBytes: [UInt8]?

        /// The event, its id the hash of its header.
        package func identified() -> Event {
            Event(header: header, headerBytes: headerBytes, signature: signature, payloadBytes: payloadBytes)
        }

        /// The event with the id `id`, which the caller knows to be the
        /// hash of its header: the `prev` of the next event of its feed as
        /// the store holds them, which the store checked against this one
        /// when it appended that one.
        package func identified(as id: EventID) -> Event {
            Event(header: header, headerBytes: headerBytes, signature: signature, payloadBytes: payloadBytes, id: id)
        }
    }
}
