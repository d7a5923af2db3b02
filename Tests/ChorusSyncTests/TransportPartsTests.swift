import ChorusCrypto
import ChorusNoise
import ChorusTestSupport
import NIOCore
import Synchronization
import Testing

@testable import ChorusSync

/// The parts of an encrypted connection, without sockets: the handshake,
/// the framing over Noise messages, the one-frame mailbox and the send gate
/// (Specs/sync-transport.md §3–§4).
@Suite("Encrypted connection parts")
struct TransportPartsTests {
    private func configuration(network: Bytes32, identity: SigningKey = .generate()) -> SecureConnectionConfiguration {
        SecureConnectionConfiguration(networkKey: network, staticKey: .generate(), identity: identity)
    }

    /// Runs both sides of a handshake in memory; the keys each side ends with.
    private func handshake(_ a: SecureConnectionConfiguration, _ b: SecureConnectionConfiguration) throws -> (
        initiator: ConnectionHandshake.Keys, responder: ConnectionHandshake.Keys
    ) {
        var initiator = try ConnectionHandshake(configuration: a, isInitiator: true)
        var responder = try ConnectionHandshake(configuration: b, isInitiator: false)
        #expect(try responder.firstMessage() == nil)
        var toResponder = try #require(try initiator.firstMessage())
        var keys: (ConnectionHandshake.Keys?, ConnectionHandshake.Keys?) = (nil, nil)
        for _ in 0..<3 where keys.0 == nil || keys.1 == nil {
            let r = try responder.read(toResponder)
            if let k = r.keys { keys.1 = k }
            guard let toInitiator = r.reply else { break }
            let i = try initiator.read(toInitiator)
            if let k = i.keys { keys.0 = k }
            guard let next = i.reply else { break }
            toResponder = next
        }
        return (try #require(keys.0), try #require(keys.1))
    }

    @Test("a handshake in memory: the same hash on both sides, ciphers that pair up, proofs that prove each side's device key")
    func handshakeInMemory() throws {
        let network = Random.bytes32()
        let (alice, bob) = (SigningKey.generate(), SigningKey.generate())
        let (a, b) = (configuration(network: network, identity: alice), configuration(network: network, identity: bob))
        let (i, r) = try handshake(a, b)
        #expect(i.handshakeHash == r.handshakeHash && i.handshakeHash.count == 64)
        #expect(i.remoteStaticKey == b.staticKey.publicKey && r.remoteStaticKey == a.staticKey.publicKey)
        // Each proof opens with the other side's receiving cipher and proves its signer.
        let proofOfAlice = try r.receive.decrypt(ciphertext: i.proofMessage)
        let proofOfBob = try i.receive.decrypt(ciphertext: r.proofMessage)
        #expect(try ConnectionHandshake.verifyPeerProof(proofOfAlice, handshakeHash: r.handshakeHash, peerIsInitiator: true) == alice.publicKey)
        #expect(try ConnectionHandshake.verifyPeerProof(proofOfBob, handshakeHash: i.handshakeHash, peerIsInitiator: false) == bob.publicKey)
        // A proof presented for the other role, or cut short, proves nothing.
        #expect(throws: SecureConnectionError.self) {
            try ConnectionHandshake.verifyPeerProof(proofOfAlice, handshakeHash: r.handshakeHash, peerIsInitiator: false)
        }
        #expect(throws: SecureConnectionError.self) {
            try ConnectionHandshake.verifyPeerProof(Array(proofOfAlice.dropLast()), handshakeHash: r.handshakeHash, peerIsInitiator: true)
        }
    }

    @Test("a handshake between two network keys fails, and a forged identity key is caught by the proof")
    func handshakeRefusals() throws {
        #expect(throws: NoiseError.self) { _ = try handshake(configuration(network: Random.bytes32()), configuration(network: Random.bytes32())) }
        let network = Random.bytes32()
        var forger = configuration(network: network)
        forger.forgedIdentityKey = SigningKey.generate().publicKey
        let (i, r) = try handshake(forger, configuration(network: network))
        let proof = try r.receive.decrypt(ciphertext: i.proofMessage)
        #expect(throws: SecureConnectionError.identityRejected("the signature does not verify for the key it names")) {
            try ConnectionHandshake.verifyPeerProof(proof, handshakeHash: r.handshakeHash, peerIsInitiator: true)
        }
    }

    @Test("length-prefixed Noise messages: whole ones only, the minimum length enforced, encoding refuses an oversized one")
    func noiseMessages() throws {
        var buffer = try TransportFraming.encode([[1, 2, 3], Array(repeating: 9, count: 20)], allocator: ByteBufferAllocator())
        let whole = buffer
        #expect(try TransportFraming.nextMessage(&buffer, minimum: 1) == [1, 2, 3])
        #expect(try TransportFraming.nextMessage(&buffer, minimum: 16) == Array(repeating: 9, count: 20))
        #expect(try TransportFraming.nextMessage(&buffer, minimum: 1) == nil)
        // Half a message waits for the rest.
        var half = whole.getSlice(at: 0, length: 4)!
        #expect(try TransportFraming.nextMessage(&half, minimum: 1) == nil && half.readableBytes == 4)
        // After the handshake a message shorter than a tag breaks the framing.
        var short = whole
        #expect(throws: SecureConnectionError.malformedMessage("a Noise message of 3 bytes")) { try TransportFraming.nextMessage(&short, minimum: 16) }
        #expect(throws: SecureConnectionError.self) {
            try TransportFraming.encode([Array(repeating: 0, count: SecureConnectionProtocol.maxNoiseMessage + 1)], allocator: ByteBufferAllocator())
        }
    }

    @Test("frames split into plaintexts and reassembled under seeded random splits, empty and multi-plaintext frames included")
    func framesRoundTrip() {
        var rng = SplitMix64(seed: 7)
        let frames: [[UInt8]] = [[], [1], Array(repeating: 5, count: 100)] + (0..<20).map { k in
            (0..<Int.random(in: 0...150_000, using: &rng)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ k) }
        }
        for maxPlaintext in [5, 17, 1000, SecureConnectionProtocol.maxNoisePlaintext] {
            // Every plaintext within the bound; the first begins with the length.
            let stream = frames.flatMap { Array(FramePlaintexts($0, maxPlaintext: maxPlaintext)) }
            #expect(stream.allSatisfy { $0.count <= maxPlaintext && !$0.isEmpty })
            // Re-split at random points: the frames come out whole and in order.
            let bytes = stream.flatMap { $0 } + TransportFraming.bigEndian(TransportFraming.closeNotify)
            var reassembler = FrameReassembler(maxFrameSize: 200_000)
            var out: [FrameReassembler.Output] = []
            var i = 0
            while i < bytes.count {
                let n = min(bytes.count - i, Int.random(in: 1...70_000, using: &rng))
                out += reassembler.feed(Array(bytes[i..<i + n]))
                i += n
            }
            #expect(out == frames.map { .frame($0) } + [.closeNotify], "split at most \(maxPlaintext)")
        }
    }

    @Test("reassembly refuses a frame over the limit and bytes after the close notify, after the frames before them")
    func reassemblyRefusals() {
        var reassembler = FrameReassembler(maxFrameSize: 10)
        #expect(reassembler.feed(TransportFraming.bigEndian(11) + [1]) == [.invalid(.frameTooLarge(size: 11, limit: 10))])
        var other = FrameReassembler(maxFrameSize: 10)
        let plaintext = TransportFraming.bigEndian(2) + [7, 8] + TransportFraming.bigEndian(TransportFraming.closeNotify) + [0]
        #expect(other.feed(plaintext) == [.frame([7, 8]), .invalid(.malformedMessage("bytes after the close notify"))])
    }

    @Test("the mailbox hands over one frame at a time: the producer waits until it is taken, and the end wakes both sides")
    func mailboxHandsOverOneAtATime() async throws {
        let box = Handoff<[UInt8], SecureConnectionError>(busy: .concurrentReceive)
        let delivered = Tally()
        let producer = Task {
            for k in 0..<3 {
                await box.put([UInt8(k)])
                delivered.add(1)
            }
        }
        // Nothing is taken: the first put waits.
        _ = try await waitFor(.seconds(120), "the first frame to wait", every: .milliseconds(2)) { box.waiting.element ? true : nil }
        #expect(delivered.value == 0)
        #expect(try await box.take() == [0])
        #expect(try await box.take() == [1])
        #expect(try await box.take() == [2])
        await producer.value
        #expect(delivered.value == 3)
        // A second reader while one waits is refused; the end wakes the waiting one.
        let reader = Task { try await box.take() }
        _ = try await waitFor(.seconds(120), "the reader to wait", every: .milliseconds(2)) { box.waiting.consumer ? true : nil }
        await #expect(throws: SecureConnectionError.concurrentReceive) { try await box.take() }
        box.finish(.failure(.connectionLost))
        await #expect(throws: SecureConnectionError.connectionLost) { try await reader.value }
        // The first end decides; a put after it returns at once.
        box.finish(.success(()))
        await box.put([9])
        await #expect(throws: SecureConnectionError.connectionLost) { try await box.take() }
        // A frame put before a clean end is still taken, then nil.
        let clean = Handoff<[UInt8], SecureConnectionError>(busy: .concurrentReceive)
        let last = Task { await clean.put([4]) }
        _ = try await waitFor(.seconds(120), "the frame to wait", every: .milliseconds(2)) { clean.waiting.element ? true : nil }
        clean.finish(.success(()))
        await last.value
        #expect(try await clean.take() == [4])
        #expect(try await clean.take() == nil)
    }

    @Test("the send gate lets one sender through at a time, in the order they came; closed, it lets everyone through")
    func sendGateOrder() async throws {
        let gate = SendGate()
        #expect(gate.tryAcquire())
        #expect(!gate.tryAcquire())
        let order = Tally()
        var waiters: [Task<Void, Never>] = []
        for k in 0..<5 {
            waiters.append(
                Task {
                    await gate.acquire()
                    order.append(k)
                    gate.release()
                })
            // Each waiter queued before the next starts.
            _ = try await waitFor(.seconds(120), "waiter \(k) to queue", every: .milliseconds(2)) { gate.waiters == k + 1 ? true : nil }
        }
        #expect(order.list.isEmpty)
        gate.release()
        for w in waiters { await w.value }
        #expect(order.list == [0, 1, 2, 3, 4])
        // Held again, then closed: a waiter goes through at once, and so does a new one.
        #expect(gate.tryAcquire())
        let blocked = Task { await gate.acquire() }
        _ = try await waitFor(.seconds(120), "the waiter to queue", every: .milliseconds(2)) { gate.waiters == 1 ? true : nil }
        gate.close()
        await blocked.value
        await gate.acquire()
        #expect(!gate.tryAcquire())
    }
}

/// A count and a list shared with tasks.
private final class Tally: Sendable {
    private let state = Mutex<(count: Int, list: [Int])>((0, []))
    func add(_ n: Int) { state.withLock { $0.count += n } }
    func append(_ k: Int) { state.withLock { $0.list.append(k) } }
    var value: Int { state.withLock { $0.count } }
    var list: [Int] { state.withLock { $0.list } }
}
