import ChorusCrypto
import ChorusNoise
import Foundation
import NIOCore
import NIOPosix

/// Why an encrypted connection failed (Specs/sync-transport.md §7).
package enum SecureConnectionError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A handshake message did not verify: almost always a different network
    /// key (PSK), otherwise tampering.
    case handshakeFailed(NoiseError)
    /// The peer closed the connection before the handshake and identity proofs
    /// completed (a peer with another network key does this).
    case closedDuringHandshake
    /// The handshake and identity proofs did not complete within the handshake
    /// timeout (Specs/sync-transport.md §6).
    case handshakeTimeout
    /// Nothing arrived from the peer, or a write could not make progress, for the idle timeout.
    case idleTimeout
    /// The peer's identity proof was malformed or its signature did not verify.
    case identityRejected(String)
    /// A frame larger than the limit: announced by the peer, or passed to `send`.
    case frameTooLarge(size: Int, limit: Int)
    /// A length prefix or message that breaks the framing rules.
    case malformedMessage(String)
    /// A transport message failed authentication (garbage or tampered bytes).
    case decryptionFailed
    /// A Noise failure other than authentication, such as nonce exhaustion.
    case noise(NoiseError)
    /// The connection ended without the peer's close notify.
    case connectionLost
    /// This side closed the connection.
    case closed
    /// `receive` called while another `receive` is waiting.
    case concurrentReceive
    /// The TCP connection to the peer could not be opened.
    case connectFailed(String)
    /// The listener could not bind its address.
    case bindFailed(String)
    /// The listener refused the connection at one of its limits (Specs/sync-transport.md §6a).
    case refusedAtCapacity(ConnectionLimits.Limit)
    /// The peer closed the connection before it answered the first handshake
    /// message: a listener at its connection limits does this.
    case refusedBeforeHandshake
    /// The static key file could not be created, written or read, is readable
    /// by others, or holds no valid key; `problem` says which.
    case keyFile(path: String, problem: String)

    /// A one-line explanation for logs and error messages.
    package var description: String {
        switch self {
        case .handshakeFailed(let e): return "handshake failed (wrong network key?): \(e)"
        case .closedDuringHandshake:
            return "peer closed the connection during the handshake: a different network key, or a listener at its limits dropped it for a newer one"
        case .refusedBeforeHandshake:
            return "peer closed the connection before answering the handshake: it is at its connection limits (try again later) or not a Chorus listener"
        case .handshakeTimeout: return "handshake timed out"
        case .idleTimeout: return "connection idle for too long"
        case .identityRejected(let why): return "peer identity rejected: \(why)"
        case .frameTooLarge(let size, let limit): return "frame of \(size) bytes exceeds the limit of \(limit)"
        case .malformedMessage(let why): return "malformed transport message: \(why)"
        case .decryptionFailed: return "transport message failed authentication"
        case .noise(let e): return "noise: \(e)"
        case .connectionLost: return "connection lost without close notify"
        case .closed: return "connection closed"
        case .concurrentReceive: return "receive called concurrently"
        case .connectFailed(let why): return "connect failed: \(why)"
        case .bindFailed(let why): return "bind failed: \(why)"
        case .keyFile(let path, let problem): return "\(path): \(problem)"
        case .refusedAtCapacity(let limit): return "refused at the connection limits: \(limit)"
        }
    }
}

/// Keys and limits of the encrypted transport.
package struct SecureConnectionConfiguration: Sendable {
    /// The PSK: `NetworkConfig.networkKey`.
    package var networkKey: Bytes32
    /// This node's static X25519 key (`NoiseStaticKeyFile`).
    package var staticKey: NoiseKeyPair
    /// This node's Ed25519 device key, proved to the peer after the handshake.
    package var identity: SigningKey
    /// Largest application frame accepted or sent (at most 2^32 - 2).
    package var maxFrameSize: Int
    /// Bounds the whole handshake, identity proofs included.
    package var handshakeTimeout: Duration
    /// Bounds every later wait for the peer: nothing received, or a write
    /// making no progress, for this long ends the connection. Each side sends
    /// a keepalive after a third of it without sending anything.
    package var idleTimeout: Duration

    /// Test hook: claim this Ed25519 key in the identity proof while signing with `identity`.
    var forgedIdentityKey: PublicKey? = nil

    /// Builds a transport configuration. `maxFrameSize` is clamped to at most
    /// 2^32 − 2 (0xFFFFFFFF is the close notify); the timeouts default to
    /// 10 s for the handshake and 120 s idle (Specs/sync-transport.md §6).
    package init(
        networkKey: Bytes32, staticKey: NoiseKeyPair, identity: SigningKey,
        maxFrameSize: Int = SecureConnectionProtocol.defaultMaxFrameSize, handshakeTimeout: Duration = .seconds(10),
        idleTimeout: Duration = .seconds(120)
    ) {
        self.networkKey = networkKey
        self.staticKey = staticKey
        self.identity = identity
        self.maxFrameSize = min(max(maxFrameSize, 0), Int(UInt32.max) - 1)
        self.handshakeTimeout = handshakeTimeout
        self.idleTimeout = idleTimeout
    }
}

extension Duration {
    /// The same span as SwiftNIO's `TimeAmount`.
    package var timeAmount: TimeAmount {
        let (seconds, attoseconds) = components
        return .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}

/// An authenticated, encrypted connection to a peer (Specs/sync-transport.md).
package final class SecureConnection: FrameTransport {
    /// The peer's proved device key and remote address.
    package let peer: PeerIdentity
    /// The Noise handshake hash both sides share (channel binding).
    package let handshakeHash: [UInt8]
    /// The peer's static X25519 key from the handshake.
    package let remoteStaticKey: [UInt8]
    /// Whether this side connected rather than accepted; it fixes the Noise
    /// roles and the role byte of the identity proofs.
    package let isInitiator: Bool
    let core: SecureConnectionCore

    init(core: SecureConnectionCore, peer: PeerIdentity, handshakeHash: [UInt8], remoteStaticKey: [UInt8], isInitiator: Bool) {
        self.core = core
        self.peer = peer
        self.handshakeHash = handshakeHash
        self.remoteStaticKey = remoteStaticKey
        self.isInitiator = isInitiator
    }

    /// Sends one frame; suspends while the peer is not reading (back-pressure).
    package func send(_ frame: [UInt8]) async throws { try await core.send(frame) }
    /// The next frame; nil after the peer's close notify.
    package func receive() async throws -> [UInt8]? { try await core.receive() }
    /// Sends a close notify and closes the connection.
    package func close() async { await core.close() }

    /// Test hook: raw bytes straight onto the socket.
    func sendRawForTesting(_ bytes: [UInt8]) async throws { try await core.writeRaw(bytes) }

    /// Connects to `host:port`, runs the handshake and identity proofs, and
    /// returns the authenticated connection.
    package static func connect(
        host: String, port: Int, configuration: SecureConnectionConfiguration,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> SecureConnection {
        let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
        do {
            channel = try await ClientBootstrap(group: group)
                .connectTimeout(configuration.handshakeTimeout.timeAmount)
                .connect(host: host, port: port, channelInitializer: SecureConnectionCore.asyncChannel)
        } catch {
            throw SecureConnectionError.connectFailed("\(host):\(port): \(error)")
        }
        let core = SecureConnectionCore(
            configuration: configuration, isInitiator: true, channel: channel.channel, onEstablished: nil)
        Task {
            do {
                try await channel.executeThenClose { inbound, outbound in
                    await core.run(inbound: inbound, outbound: outbound)
                }
            } catch {
                await core.fail(.connectionLost)
            }
        }
        return try await core.waitEstablished()
    }
}

/// First error wins; shared with event-loop timers.
final class SecureFailureBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: SecureConnectionError?
    /// Whether the handshake finished before its deadline: the deadline and
    /// the handshake's end race (the timer runs on the event loop, the
    /// handshake on the actor), so exactly one of them claims the outcome.
    private var handshakeOver = false

    func set(_ error: SecureConnectionError) {
        lock.lock()
        if stored == nil { stored = error }
        lock.unlock()
    }

    /// The handshake deadline passed: records the timeout and returns true,
    /// unless the handshake already completed.
    func expireHandshake() -> Bool {
        lock.withLock {
            guard !handshakeOver else { return false }
            handshakeOver = true
            if stored == nil { stored = .handshakeTimeout }
            return true
        }
    }

    /// The handshake completed: returns false when its deadline passed first.
    func completeHandshake() -> Bool {
        lock.withLock {
            guard !handshakeOver else { return false }
            handshakeOver = true
            return true
        }
    }

    var error: SecureConnectionError? {
        lock.lock()
        defer { lock.unlock() }
        return stored
    }
}

/// One connection's state: handshake, ciphers, reassembly, the one-frame
/// mailbox that gives back-pressure, and the send queue.
actor SecureConnectionCore {
    static let channelConfiguration = NIOAsyncChannel<ByteBuffer, ByteBuffer>.Configuration(
        backPressureStrategy: .init(lowWatermark: 2, highWatermark: 4))

    /// A new TCP channel, dialled or accepted, as the async channel a
    /// connection runs on: the one set-up both sides share (frames are
    /// small and latency-bound, so no Nagle delay).
    static func asyncChannel(_ channel: any Channel) -> EventLoopFuture<NIOAsyncChannel<ByteBuffer, ByteBuffer>> {
        channel.eventLoop.makeCompletedFuture {
            try channel.syncOptions?.setOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel, configuration: channelConfiguration)
        }
    }
    /// Frame length value reserved for the close notify.
    static let closeNotify: UInt32 = .max

    enum Phase { case handshake, awaitingProof, established, finished }
    enum Step { case proceed, stop }

    let configuration: SecureConnectionConfiguration
    let isInitiator: Bool
    let channel: any Channel
    let address: String
    private let failure = SecureFailureBox()
    private let onEstablished: (@Sendable (SecureConnection) -> Void)?

    private var phase = Phase.handshake
    /// Whether a handshake message from the peer has been read.
    private var answered = false
    private var outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>?
    private var handshake: HandshakeState?
    private var sendCipher: CipherState?
    private var receiveCipher: CipherState?
    private var handshakeHash: [UInt8] = []
    private var remoteStatic: [UInt8] = []

    private var handshakeTimer: Scheduled<Void>?
    private var idleTimer: Scheduled<Void>?
    private var keepalive: Task<Void, Never>?
    private var lastSend = ContinuousClock.now

    // Reassembly of frames from transport plaintexts.
    private var header: [UInt8] = []
    private var body: [UInt8] = []
    private var remaining: Int?

    // Mailbox: at most one undelivered frame.
    private var pending: [UInt8]?
    private var consumer: CheckedContinuation<[UInt8]?, any Error>?
    private var producer: CheckedContinuation<Void, Never>?
    private var end: Result<Void, SecureConnectionError>?

    // Connect waiter.
    private var established: Result<SecureConnection, SecureConnectionError>?
    private var establishedWaiter: CheckedContinuation<SecureConnection, any Error>?

    // Send queue.
    private var sending = false
    private var sendWaiters: [CheckedContinuation<Void, Never>] = []

    init(
        configuration: SecureConnectionConfiguration, isInitiator: Bool, channel: any Channel,
        onEstablished: (@Sendable (SecureConnection) -> Void)?
    ) {
        self.configuration = configuration
        self.isInitiator = isInitiator
        self.channel = channel
        self.onEstablished = onEstablished
        if let remote = channel.remoteAddress {
            address = "\(remote.ipAddress ?? "?"):\(remote.port ?? 0)"
        } else {
            address = "?"
        }
    }

    var failureBeforeEstablished: SecureConnectionError? {
        if case .failure(let e) = established { return e }
        return nil
    }

    // MARK: - the connection's life

    func run(inbound: NIOAsyncChannelInboundStream<ByteBuffer>, outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>) async {
        self.outbound = outbound
        let box = failure
        let channel = self.channel
        handshakeTimer = channel.eventLoop.scheduleTask(in: configuration.handshakeTimeout.timeAmount) {
            if box.expireHandshake() { channel.close(promise: nil) }
        }
        do {
            let hs = try HandshakeState(
                pattern: SecureConnectionProtocol.pattern, initiator: isInitiator, prologue: SecureConnectionProtocol.prologue,
                staticKey: configuration.staticKey, psk: configuration.networkKey.bytes)
            handshake = hs
            if isInitiator { try await writeMessages([hs.writeMessage()]) }
            var buffer = ByteBuffer()
            reading: for try await chunk in inbound {
                idleTimer?.cancel()
                idleTimer = nil
                var chunk = chunk
                buffer.writeBuffer(&chunk)
                while let message = try nextMessage(&buffer) {
                    if phase == .finished { continue }  // draining after our close notify
                    if try await handle(message) == .stop { break reading }
                }
                buffer.discardReadBytes()
                armIdleTimer()
            }
            if phase != .finished { throw failure.error ?? closedByPeer }
        } catch let error as SecureConnectionError {
            fail(failure.error ?? error)
        } catch let error as NoiseError {
            fail(failure.error ?? .handshakeFailed(error))
        } catch {
            fail(failure.error ?? closedByPeer)
        }
        if end == nil { fail(.connectionLost) }
        stopTimers()
    }

    /// Why the connection ended when the peer closed it in the current phase.
    private var closedByPeer: SecureConnectionError {
        switch phase {
        case .established, .finished: .connectionLost
        case .handshake where isInitiator && !answered: .refusedBeforeHandshake
        case .handshake, .awaitingProof: .closedDuringHandshake
        }
    }

    /// One 2-byte-length-prefixed Noise message out of the buffer, if complete.
    private func nextMessage(_ buffer: inout ByteBuffer) throws(SecureConnectionError) -> [UInt8]? {
        guard let length = buffer.getInteger(at: buffer.readerIndex, as: UInt16.self) else { return nil }
        let minimum = phase == .handshake ? 1 : 16
        guard Int(length) >= minimum else { throw .malformedMessage("a Noise message of \(length) bytes") }
        guard buffer.readableBytes >= 2 + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: 2)
        return buffer.readBytes(length: Int(length))
    }

    private func handle(_ message: [UInt8]) async throws -> Step {
        switch phase {
        case .handshake:
            guard let hs = handshake else { throw SecureConnectionError.malformedMessage("no handshake in progress") }
            _ = try hs.readMessage(message)  // payloads are empty and ignored
            answered = true
            if !hs.isComplete, hs.isMyTurn { try await writeMessages([hs.writeMessage()]) }
            if hs.isComplete {
                handshakeHash = hs.handshakeHash
                remoteStatic = hs.remoteStaticKey ?? []
                let ciphers = try hs.split()
                handshake = nil
                sendCipher = ciphers.send
                receiveCipher = ciphers.receive
                phase = .awaitingProof
                var proof = SecureConnectionProtocol.identityProof(
                    signer: configuration.identity, handshakeHash: handshakeHash, signerIsInitiator: isInitiator)
                if let forged = configuration.forgedIdentityKey { proof.replaceSubrange(0..<32, with: forged.bytes) }
                try await writeMessages([encrypt(proof)])
            }
            return .proceed
        case .awaitingProof:
            let proof = try decrypt(message)
            guard proof.count == SecureConnectionProtocol.identityProofLength else {
                throw SecureConnectionError.identityRejected("proof of \(proof.count) bytes, expected 96")
            }
            guard
                let key = SecureConnectionProtocol.verifyIdentityProof(
                    proof, handshakeHash: handshakeHash, signerIsInitiator: !isInitiator)
            else { throw SecureConnectionError.identityRejected("the signature does not verify for the key it names") }
            // A connection the deadline already closed must not be handed
            // out as established (it would die at once).
            guard failure.completeHandshake() else { throw failure.error ?? SecureConnectionError.handshakeTimeout }
            phase = .established
            handshakeTimer?.cancel()
            handshakeTimer = nil
            startKeepalive()
            let connection = SecureConnection(
                core: self, peer: PeerIdentity(key: key, address: address), handshakeHash: handshakeHash,
                remoteStaticKey: remoteStatic, isInitiator: isInitiator)
            established = .success(connection)
            if let waiter = establishedWaiter {
                establishedWaiter = nil
                waiter.resume(returning: connection)
            }
            onEstablished?(connection)
            return .proceed
        case .established:
            let plaintext = try decrypt(message)
            if plaintext.isEmpty { return .proceed }  // keepalive
            return try await consume(plaintext)
        case .finished:
            return .stop
        }
    }

    /// Feeds transport plaintext into frame reassembly; delivers whole frames.
    private func consume(_ plaintext: [UInt8]) async throws(SecureConnectionError) -> Step {
        var i = 0
        while i < plaintext.count {
            if let left = remaining {
                let take = min(left, plaintext.count - i)
                body.append(contentsOf: plaintext[i..<i + take])
                i += take
                remaining = left - take
            } else {
                let take = min(4 - header.count, plaintext.count - i)
                header.append(contentsOf: plaintext[i..<i + take])
                i += take
                guard header.count == 4 else { break }
                let length = header.withUnsafeBytes { UInt32(bigEndian: $0.loadUnaligned(as: UInt32.self)) }
                header.removeAll(keepingCapacity: true)
                if length == Self.closeNotify {
                    guard i == plaintext.count else { throw .malformedMessage("bytes after the close notify") }
                    finish(.success(()))
                    return .stop
                }
                guard Int(length) <= configuration.maxFrameSize else {
                    throw .frameTooLarge(size: Int(length), limit: configuration.maxFrameSize)
                }
                remaining = Int(length)
                body = []
                body.reserveCapacity(min(Int(length), 1 << 20))
            }
            if remaining == 0 {
                remaining = nil
                let frame = body
                body = []
                await deliver(frame)
                if phase == .finished { return .stop }
            }
        }
        return .proceed
    }

    private func encrypt(_ plaintext: [UInt8]) throws(SecureConnectionError) -> [UInt8] {
        guard let cipher = sendCipher else { throw .closed }
        do { return try cipher.encrypt(plaintext: plaintext) } catch { throw .noise(error) }
    }

    private func decrypt(_ message: [UInt8]) throws(SecureConnectionError) -> [UInt8] {
        guard let cipher = receiveCipher else { throw .malformedMessage("no receive cipher") }
        do { return try cipher.decrypt(ciphertext: message) } catch {
            throw error == .decryptionFailed ? .decryptionFailed : .noise(error)
        }
    }

    // MARK: - timers

    private func armIdleTimer() {
        guard phase == .established, idleTimer == nil else { return }
        let box = failure
        let channel = self.channel
        idleTimer = channel.eventLoop.scheduleTask(in: configuration.idleTimeout.timeAmount) {
            box.set(.idleTimeout)
            channel.close(promise: nil)
        }
    }

    private func startKeepalive() {
        let interval = configuration.idleTimeout / 3
        keepalive = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                guard let self, !Task.isCancelled else { return }
                await self.sendKeepaliveIfQuiet(interval)
            }
        }
    }

    private func sendKeepaliveIfQuiet(_ interval: Duration) async {
        guard phase == .established, !sending, ContinuousClock.now - lastSend >= interval else { return }
        sending = true
        defer { releaseSend() }
        do { try await writeMessages([encrypt([])]) } catch { fail(failure.error ?? .connectionLost) }
    }

    private func stopTimers() {
        handshakeTimer?.cancel()
        handshakeTimer = nil
        idleTimer?.cancel()
        idleTimer = nil
        keepalive?.cancel()
        keepalive = nil
    }

    // MARK: - mailbox

    private func deliver(_ frame: [UInt8]) async {
        if let waiting = consumer {
            consumer = nil
            waiting.resume(returning: frame)
            return
        }
        pending = frame
        await withCheckedContinuation { producer = $0 }
    }

    func receive() async throws -> [UInt8]? {
        if let frame = pending {
            pending = nil
            producer?.resume()
            producer = nil
            return frame
        }
        if let end {
            switch end {
            case .success: return nil
            case .failure(let error): throw error
            }
        }
        guard consumer == nil else { throw SecureConnectionError.concurrentReceive }
        return try await withCheckedThrowingContinuation { consumer = $0 }
    }

    /// Ends the connection with `result` (first call wins) and wakes every waiter.
    private func finish(_ result: Result<Void, SecureConnectionError>) {
        if end == nil { end = result }
        phase = .finished
        if let waiting = consumer {
            consumer = nil
            switch result {
            case .success: waiting.resume(returning: nil)
            case .failure(let error): waiting.resume(throwing: error)
            }
        }
        producer?.resume()
        producer = nil
        if established == nil {
            let error: SecureConnectionError
            if case .failure(let e) = result { error = e } else { error = .closedDuringHandshake }
            established = .failure(error)
            establishedWaiter?.resume(throwing: error)
            establishedWaiter = nil
        }
        idleTimer?.cancel()
        idleTimer = nil
        keepalive?.cancel()
        keepalive = nil
        handshake = nil
        receiveCipher?.clear()
        for waiter in sendWaiters { waiter.resume() }
        sendWaiters = []
    }

    func fail(_ error: SecureConnectionError) {
        let alreadyEnded = end != nil
        finish(.failure(error))
        if !alreadyEnded || error != .closed { channel.close(promise: nil) }
    }

    func waitEstablished() async throws -> SecureConnection {
        if let established { return try established.get() }
        return try await withCheckedThrowingContinuation { establishedWaiter = $0 }
    }

    // MARK: - sending

    private func acquireSend() async {
        if !sending {
            sending = true
            return
        }
        await withCheckedContinuation { sendWaiters.append($0) }
    }

    private func releaseSend() {
        if sendWaiters.isEmpty || phase == .finished {
            sending = false
        } else {
            sendWaiters.removeFirst().resume()
        }
    }

    func send(_ frame: [UInt8]) async throws {
        guard frame.count <= configuration.maxFrameSize else {
            throw SecureConnectionError.frameTooLarge(size: frame.count, limit: configuration.maxFrameSize)
        }
        await acquireSend()
        defer { releaseSend() }
        try checkOpen()
        let maxPlain = SecureConnectionProtocol.maxNoisePlaintext
        var offset = 0
        var first = true
        var batch: [[UInt8]] = []
        var batchBytes = 0
        while first || offset < frame.count {
            var plaintext: [UInt8] = []
            if first { plaintext = Self.bigEndian(UInt32(frame.count)) }
            let take = min(maxPlain - plaintext.count, frame.count - offset)
            plaintext.append(contentsOf: frame[offset..<offset + take])
            offset += take
            first = false
            let message = try encrypt(plaintext)
            batchBytes += message.count + 2
            batch.append(message)
            if batchBytes >= 256 << 10 {
                try await writeMessages(batch)
                try checkOpen()
                batch = []
                batchBytes = 0
            }
        }
        if !batch.isEmpty { try await writeMessages(batch) }
    }

    private func checkOpen() throws(SecureConnectionError) {
        guard phase == .established else {
            if case .failure(let error) = end { throw error }
            throw .closed
        }
    }

    func close() async {
        guard phase == .established else {
            fail(.closed)
            return
        }
        if !sending {
            sending = true
            // Best effort: a peer that does not read cannot hold this up for longer than the idle timeout.
            if let notify = try? encrypt(Self.bigEndian(Self.closeNotify)) { try? await writeMessages([notify]) }
            releaseSend()
        }
        finish(.failure(.closed))
        // Wait for the peer to close after our notify, but not for long.
        let channel = self.channel
        channel.eventLoop.scheduleTask(in: min(configuration.idleTimeout, .seconds(2)).timeAmount) {
            channel.close(promise: nil)
        }
    }

    static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8),
         UInt8(truncatingIfNeeded: value)]
    }

    /// Writes Noise messages, each with its 2-byte big-endian length prefix,
    /// bounded by the idle timeout.
    private func writeMessages(_ messages: [[UInt8]]) async throws {
        var buffer = channel.allocator.buffer(capacity: messages.reduce(0) { $0 + $1.count + 2 })
        for message in messages {
            guard message.count <= SecureConnectionProtocol.maxNoiseMessage else {
                throw SecureConnectionError.malformedMessage("outgoing Noise message of \(message.count) bytes")
            }
            buffer.writeInteger(UInt16(message.count))
            buffer.writeBytes(message)
        }
        try await writeBuffer(buffer)
    }

    func writeRaw(_ bytes: [UInt8]) async throws {
        try await writeBuffer(channel.allocator.buffer(bytes: bytes))
    }

    private func writeBuffer(_ buffer: ByteBuffer) async throws {
        guard let outbound else { throw SecureConnectionError.closed }
        let box = failure
        let channel = self.channel
        let timer = channel.eventLoop.scheduleTask(in: configuration.idleTimeout.timeAmount) {
            box.set(.idleTimeout)
            channel.close(promise: nil)
        }
        defer { timer.cancel() }
        do {
            try await outbound.write(buffer)
            lastSend = .now
        } catch {
            if let e = failure.error { throw e }
            if case .failure(let e) = end { throw e }
            throw closedByPeer
        }
    }
}

extension SecureConnectionError {
    /// A stable, machine-readable name of the error, in snake case.
    package var code: String {
        switch self {
        case .handshakeFailed: "handshake_failed"
        case .closedDuringHandshake: "closed_during_handshake"
        case .handshakeTimeout: "handshake_timeout"
        case .idleTimeout: "idle_timeout"
        case .identityRejected: "identity_rejected"
        case .frameTooLarge: "frame_too_large"
        case .malformedMessage: "malformed_message"
        case .decryptionFailed: "decryption_failed"
        case .noise: "noise_error"
        case .connectionLost: "connection_lost"
        case .closed: "closed"
        case .concurrentReceive: "concurrent_receive"
        case .connectFailed: "connect_failed"
        case .bindFailed: "bind_failed"
        case .refusedAtCapacity: "refused_at_capacity"
        case .refusedBeforeHandshake: "refused_before_handshake"
        case .keyFile: "key_file"
        }
    }
}
