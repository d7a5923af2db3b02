import ChorusCrypto
import ChorusNoise
import Foundation
import NIOCore
import NIOPosix

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
            channel = try await TCPChannels.dial(host: host, port: port, timeout: configuration.handshakeTimeout, group: group)
        } catch {
            throw SecureConnectionError.connectFailed("\(host):\(port): \(TCPChannels.reason(error))")
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

/// One connection's state: handshake, ciphers, reassembly, the one-frame
/// mailbox that gives back-pressure, and the send queue.
actor SecureConnectionCore {
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
    private var handshake: ConnectionHandshake?
    private var sendCipher: CipherState?
    private var receiveCipher: CipherState?
    private var handshakeHash: [UInt8] = []
    private var remoteStatic: [UInt8] = []
    private var timers: ConnectionTimers
    private var lastSend = ContinuousClock.now
    private var reassembler: FrameReassembler
    /// Received frames, one at a time: the reader stops reading the socket while one waits.
    private let mailbox = Handoff<[UInt8], SecureConnectionError>(busy: .concurrentReceive)
    private var end: Result<Void, SecureConnectionError>?
    /// Whoever waits for the handshake (`connect`).
    private let established = Outcome<SecureConnection, SecureConnectionError>()
    private let sends = SendGate()

    init(
        configuration: SecureConnectionConfiguration, isInitiator: Bool, channel: any Channel,
        onEstablished: (@Sendable (SecureConnection) -> Void)?
    ) {
        self.configuration = configuration
        self.isInitiator = isInitiator
        self.channel = channel
        self.onEstablished = onEstablished
        reassembler = FrameReassembler(maxFrameSize: configuration.maxFrameSize)
        timers = ConnectionTimers(loop: channel.eventLoop, failure: failure, close: { channel.close(promise: nil) })
        if let remote = channel.remoteAddress {
            address = "\(remote.ipAddress ?? "?"):\(remote.port ?? 0)"
        } else {
            address = "?"
        }
    }

    var failureBeforeEstablished: SecureConnectionError? {
        if case .failure(let e) = established.result { return e }
        return nil
    }

    // MARK: - the connection's life

    func run(inbound: NIOAsyncChannelInboundStream<ByteBuffer>, outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>) async {
        self.outbound = outbound
        timers.armHandshake(configuration.handshakeTimeout)
        do {
            let hs = try ConnectionHandshake(configuration: configuration, isInitiator: isInitiator)
            handshake = hs
            if let first = try hs.firstMessage() { try await writeMessages([first]) }
            var buffer = ByteBuffer()
            reading: for try await chunk in inbound {
                timers.cancelIdle()
                var chunk = chunk
                buffer.writeBuffer(&chunk)
                while let message = try TransportFraming.nextMessage(&buffer, minimum: phase == .handshake ? 1 : 16) {
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
        timers.stopAll()
    }

    /// Why the connection ended when the peer closed it in the current phase.
    private var closedByPeer: SecureConnectionError {
        switch phase {
        case .established, .finished: .connectionLost
        case .handshake where isInitiator && !answered: .refusedBeforeHandshake
        case .handshake, .awaitingProof: .closedDuringHandshake
        }
    }

    private func handle(_ message: [UInt8]) async throws -> Step {
        switch phase {
        case .handshake:
            guard var hs = handshake else { throw SecureConnectionError.malformedMessage("no handshake in progress") }
            let step = try hs.read(message)
            handshake = hs
            answered = true
            if let reply = step.reply { try await writeMessages([reply]) }
            if let keys = step.keys {
                handshake = nil
                handshakeHash = keys.handshakeHash
                remoteStatic = keys.remoteStaticKey
                sendCipher = keys.send
                receiveCipher = keys.receive
                phase = .awaitingProof
                try await writeMessages([keys.proofMessage])
            }
            return .proceed
        case .awaitingProof:
            let key = try ConnectionHandshake.verifyPeerProof(try decrypt(message), handshakeHash: handshakeHash, peerIsInitiator: !isInitiator)
            // A connection the deadline already closed must not be handed
            // out as established (it would die at once).
            guard failure.completeHandshake() else { throw failure.error ?? SecureConnectionError.handshakeTimeout }
            phase = .established
            timers.cancelHandshake()
            startKeepalive()
            let connection = SecureConnection(
                core: self, peer: PeerIdentity(key: key, address: address), handshakeHash: handshakeHash,
                remoteStaticKey: remoteStatic, isInitiator: isInitiator)
            established.settle(.success(connection))
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
        for output in reassembler.feed(plaintext) {
            switch output {
            case .frame(let frame):
                await mailbox.put(frame)
                if phase == .finished { return .stop }
            case .closeNotify:
                finish(.success(()))
                return .stop
            case .invalid(let error):
                throw error
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
        guard phase == .established else { return }
        timers.armIdle(configuration.idleTimeout)
    }

    private func startKeepalive() {
        let interval = configuration.idleTimeout / 3
        timers.startKeepalive(every: interval) { [weak self] in
            guard let self else { return false }
            await self.sendKeepaliveIfQuiet(interval)
            return true
        }
    }

    private func sendKeepaliveIfQuiet(_ interval: Duration) async {
        guard phase == .established, ConnectionTimers.keepaliveIsDue(lastSend: lastSend, now: .now, interval: interval), sends.tryAcquire()
        else { return }
        defer { sends.release() }
        do { try await writeMessages([encrypt([])]) } catch { fail(failure.error ?? .connectionLost) }
    }

    // MARK: - receiving

    func receive() async throws -> [UInt8]? { try await mailbox.take() }

    /// Ends the connection with `result` (first call wins) and wakes every waiter.
    private func finish(_ result: Result<Void, SecureConnectionError>) {
        if end == nil { end = result }
        phase = .finished
        mailbox.finish(result)
        if established.result == nil {
            let error: SecureConnectionError
            if case .failure(let e) = result { error = e } else { error = .closedDuringHandshake }
            established.settle(.failure(error))
        }
        timers.cancelIdle()
        timers.cancelKeepalive()
        handshake = nil
        receiveCipher?.clear()
        sends.close()
    }

    func fail(_ error: SecureConnectionError) {
        let alreadyEnded = end != nil
        finish(.failure(error))
        if !alreadyEnded || error != .closed { channel.close(promise: nil) }
    }

    func waitEstablished() async throws -> SecureConnection { try await established.value() }

    // MARK: - sending

    func send(_ frame: [UInt8]) async throws {
        guard frame.count <= configuration.maxFrameSize else {
            throw SecureConnectionError.frameTooLarge(size: frame.count, limit: configuration.maxFrameSize)
        }
        await sends.acquire()
        defer { sends.release() }
        try checkOpen()
        var batch: [[UInt8]] = []
        var batchBytes = 0
        for plaintext in FramePlaintexts(frame) {
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
        if sends.tryAcquire() {
            // Best effort: a peer that does not read cannot hold this up for longer than the idle timeout.
            if let notify = try? encrypt(TransportFraming.bigEndian(TransportFraming.closeNotify)) { try? await writeMessages([notify]) }
            sends.release()
        }
        finish(.failure(.closed))
        // Wait for the peer to close after our notify, but not for long.
        let channel = self.channel
        channel.eventLoop.scheduleTask(in: min(configuration.idleTimeout, .seconds(2)).timeAmount) {
            channel.close(promise: nil)
        }
    }

    /// Writes Noise messages, each with its 2-byte big-endian length prefix,
    /// bounded by the idle timeout.
    private func writeMessages(_ messages: [[UInt8]]) async throws {
        try await writeBuffer(TransportFraming.encode(messages, allocator: channel.allocator))
    }

    func writeRaw(_ bytes: [UInt8]) async throws {
        try await writeBuffer(channel.allocator.buffer(bytes: bytes))
    }

    private func writeBuffer(_ buffer: ByteBuffer) async throws {
        guard let outbound else { throw SecureConnectionError.closed }
        let timer = timers.deadline(configuration.idleTimeout)
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
