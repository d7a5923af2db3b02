import ChorusCBOR
import ChorusCrypto
import ChorusEncryption
import ChorusEvents
import ChorusNode
import ChorusNoise
import ChorusOperations
import ChorusProjections
import ChorusSync

/// The parsers that read bytes from outside the node, each as a function of
/// one input that must return for every input (a throw is an answer; a trap
/// is a defect) and that checks what the Specs promise of what it accepts:
/// one byte string per value (the canonical encodings re-encode to the input),
/// schemas and typed readers agreeing, the in-place readers agreeing with the
/// decoder, a sketch's decoded difference reproducing its sums. A broken
/// promise traps, so the fuzzer reports it like a crash.
///
/// `chorus-fuzz` runs them under libFuzzer (Tools/fuzz); the test suite runs
/// them over the vectors and seeded mutations of them (`FuzzTargetTests`).
package enum FuzzTarget: String, CaseIterable, Sendable {
    /// `CBORDecoder.decode` (Specs/events.md §2): what decodes re-encodes to the input.
    case cbor
    /// An envelope as ingest reads it (Specs/events.md §3, §6): decode with
    /// schema check, the typed payload of its kind, the signature check.
    case event
    /// A sync frame (Specs/sync.md §3): what decodes re-encodes to the frame.
    case frame
    /// Transport plaintexts reassembled into frames (Specs/sync-transport.md §4).
    case reassembly
    /// A feed sketch's sums (Specs/sync.md §4.2): the difference decoded
    /// reproduces the sums.
    case sketch
    /// The Noise handshake's first and second messages and the identity proof
    /// (Specs/sync-transport.md §3), as a peer without the network key sends them.
    case handshake
    /// Sealed chat content and its plaintexts (Specs/encryption.md §7).
    case sealed
    /// Event files (Specs/events.md §8) and the texts a user pastes: invites,
    /// relay addresses, ids, page cursors.
    case text
    /// A served node's sync session with a peer that sends the input's frames
    /// (`SessionFuzzing`).
    case session
    /// Signed events of every kind with payloads their schemas accept,
    /// ingested and folded by one node, then queried (`FoldFuzzing`).
    case fold

    /// Runs the target on one input.
    package func run(_ data: [UInt8]) {
        switch self {
        case .cbor: Self.cbor(data)
        case .event: Self.event(data)
        case .frame: Self.frame(data)
        case .reassembly: Self.reassembly(data)
        case .sketch: Self.sketch(data)
        case .handshake: Self.handshake(data)
        case .sealed: Self.sealed(data)
        case .text: Self.text(data)
        case .session: SessionFuzzing.shared.run(data)
        case .fold: FoldFuzzing.shared.run(data)
        }
    }

    static func cbor(_ data: [UInt8]) {
        guard let value = try? CBORDecoder.decode(data) else { return }
        let again = CBOREncoder.encode(value)
        promise(again == data, "CBOR that decodes must re-encode to the same bytes")
        var reader = HeadReader(data)
        _ = reader.head(major: 5)
    }

    static func event(_ data: [UInt8]) {
        guard let event = try? Event.decode(data) else { return }
        promise(event.encoded() == data, "an envelope that decodes must re-encode to the same bytes")
        // The payload the event keeps from its schema check is its bytes' decoding.
        promise(event.payload == event.payloadBytes.flatMap { try? CBORDecoder.decode($0) }, "an event must keep the payload its bytes decode to")
        if let payload = event.payload, let type = event.kind.payloadType {
            // The schema passed, so the typed reader must read it, and its
            // builder must give the same payload back (one byte string per payload).
            guard let typed = try? type.init(reading: payload) else { violated("a payload its schema accepts must read as its typed payload") }
            promise(CBOREncoder.encode(typed.cbor) == CBOREncoder.encode(payload), "a typed payload must rebuild the payload it read")
        }
        _ = event.verifySignature()
        // The store's readers of envelopes it checked when they arrived.
        promise((try? Event.decodeStored(data))?.id == event.id, "a stored envelope must read back with its id")
        promise((try? Event.storedPayload(ofEnvelope: data)) == event.payloadBytes, "a stored envelope must give back its payload")
    }

    static func frame(_ data: [UInt8]) {
        guard let message = try? SyncMessage.decode(data) else { return }
        promise(message.encoded() == data, "a frame that decodes must re-encode to the same bytes")
    }

    static func reassembly(_ data: [UInt8]) {
        // The first byte sets the largest frame, then plaintexts follow, each
        // after a one-byte length.
        guard let first = data.first else { return }
        var reassembler = FrameReassembler(maxFrameSize: Int(first) * 16)
        var i = 1
        var ended = false
        while i < data.count, !ended {
            let length = Int(data[i])
            let plaintext = Array(data[(i + 1)..<min(data.count, i + 1 + length)])
            i += 1 + length
            for output in reassembler.feed(plaintext) {
                switch output {
                case .frame(let frame): promise(frame.count <= reassembler.maxFrameSize, "a frame over the largest size was let through")
                case .closeNotify, .invalid: ended = true
                }
            }
        }
    }

    static func sketch(_ data: [UInt8]) {
        // Words of 8 bytes: the first says how many are sums (an even number),
        // the rest the decoder's candidate tags.
        let words = stride(from: 0, to: data.count - data.count % 8, by: 8).map { start in
            data[start..<start + 8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        }
        guard let header = words.first else { return }
        let rest = Array(words.dropFirst())
        let sumCount = min(rest.count - rest.count % 2, Int(header % 64) * 2)
        let sums = Array(rest.prefix(sumCount))
        let candidates = Array(rest.dropFirst(sumCount))
        guard let difference = FeedSketch.decode(sums, candidates: candidates, last: header & 0x8000_0000_0000_0000 == 0) else { return }
        promise(difference.count <= sums.count / 2, "a sketch of \(sums.count) sums cannot decode \(difference.count) differences")
        promise(Set(difference.map(\.tag)).count == difference.count, "a decoded difference names each tag once")
        // s_j = Σ error · tag^j for j = 1 … 2t: the difference must give back the sums.
        var powers = difference.map(\.tag)
        for j in 0..<sums.count {
            var s: UInt64 = 0
            for (k, d) in difference.enumerated() { s ^= GF64.mul(d.error, powers[k]) }
            promise(s == sums[j], "a decoded sketch difference must reproduce the sums it came from")
            for k in powers.indices { powers[k] = GF64.mul(powers[k], difference[k].tag) }
        }
    }

    static func handshake(_ data: [UInt8]) {
        let pattern = NoisePattern.XXpsk3
        let prologue = SecureConnectionProtocol.prologue
        let psk = [UInt8](repeating: 7, count: 32)
        guard let responderKey = try? NoiseKeyPair(privateKey: [UInt8](repeating: 1, count: 32)),
            let initiatorKey = try? NoiseKeyPair(privateKey: [UInt8](repeating: 2, count: 32))
        else { return }
        // As the responder: the input is the first message.
        if let responder = try? HandshakeState(pattern: pattern, initiator: false, prologue: prologue, staticKey: responderKey, psk: psk),
            (try? responder.readMessage(data)) != nil
        {
            _ = try? responder.writeMessage()
        }
        // As the initiator: the input answers its first message.
        if let initiator = try? HandshakeState(pattern: pattern, initiator: true, prologue: prologue, staticKey: initiatorKey, psk: psk),
            (try? initiator.writeMessage()) != nil
        {
            promise((try? initiator.readMessage(data)) == nil, "a second message not made with the network key must not read")
        }
        promise(
            SecureConnectionProtocol.verifyIdentityProof(data, handshakeHash: [UInt8](repeating: 3, count: 64), signerIsInitiator: true) == nil,
            "an identity proof not signed over this handshake must not verify")
    }

    static func sealed(_ data: [UInt8]) {
        // As plaintexts a member's device opened: the in-place readings and
        // the decoder must agree.
        let body = MessageContent.decode(data)
        if let body { promise(body.text != nil || body.picture != nil || body.attachment != nil, "a message body holds something") }
        _ = MessageContent.decode(data, edit: true)
        _ = TitleContent.decode(data)
        // As a sealed value: it must not open under a key that did not seal it.
        let key = [UInt8](repeating: 9, count: 32)
        let chat = ObjectID.zero
        promise(
            ChatCrypto.open(data, epochKey: key, kind: .messageSent, chat: chat, object: chat, author: chat) == nil,
            "a sealed value not made with the key must not open")
        _ = ChatCrypto.epoch(ofSealed: data)
        _ = ChatCrypto.decryptAttachment(data, key: key)
    }

    static func text(_ data: [UInt8]) {
        _ = EventFile.read(data)
        let text = String(decoding: data, as: UTF8.self)
        if let config = try? NetworkConfig(invite: text) {
            promise((try? NetworkConfig(invite: config.invite)) == config, "an invite must carry its configuration again")
        }
        _ = try? NetworkConfig.parse(json: text, source: "fuzz")
        _ = try? Relay(parsing: text)
        if let id = Bytes32(hex: text) { promise(Bytes32(hex: id.hex) == id, "an id must read back from its hex") }
        if let cursor = MessageCursor(text) { promise(MessageCursor(cursor.description) == cursor, "a cursor must read back from its text") }
        if let cursor = ChatListCursor(text) { promise(ChatListCursor(cursor.description) == cursor, "a cursor must read back from its text") }
    }
}

/// Traps with `what` unless `condition`: a broken promise is reported as a crash.
func promise(_ condition: @autoclosure () -> Bool, _ what: @autoclosure () -> String) {
    if !condition() { violated(what()) }
}

func violated(_ what: String) -> Never {
    fatalError("fuzz promise broken: \(what)")
}
