#if Service
import ChorusTestSupport
import Foundation
import Synchronization

/// A WebSocket client over a plain socket (RFC 6455), enough for the tests:
/// the upgrade request, unmasked text frames from the server (fragmented or
/// not; pings skipped), and a masked close. Blocking: run it off the pool.
final class RawWebSocket: @unchecked Sendable {
    let fd: Int32
    private var pending: [UInt8] = []

    /// Connects to 127.0.0.1:`port` and asks for `path`; the status line and
    /// headers of the answer, and the socket when it was upgraded (101).
    static func open(port: Int, path: String, headers: [String: String]) throws -> (status: Int, socket: RawWebSocket?, head: String) {
        guard let fd = rawTCPConnection(port: port) else { throw TestFailure("cannot connect to 127.0.0.1:\(port)") }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let socket = RawWebSocket(fd: fd)
        var request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        request += "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        for (name, value) in headers { request += "\(name): \(value)\r\n" }
        try socket.send(Array((request + "\r\n").utf8))
        let head = try socket.readHead()
        let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
        if status != 101 {
            let body = (try? socket.take(min(socket.pending.count, 500))).map { String(decoding: $0, as: UTF8.self) } ?? ""
            Foundation.close(fd)
            return (status, nil, head + "\n" + body)
        }
        return (status, socket, head)
    }

    private init(fd: Int32) { self.fd = fd }

    private func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { throw TestFailure("write failed") }
            sent += n
        }
    }

    private func fill() throws {
        var buffer = [UInt8](repeating: 0, count: 65536)
        let n = read(fd, &buffer, buffer.count)
        guard n > 0 else { throw TestFailure("the connection closed (or 30 s passed)") }
        pending += buffer[0..<n]
    }

    private func take(_ count: Int) throws -> [UInt8] {
        while pending.count < count { try fill() }
        defer { pending.removeFirst(count) }
        return Array(pending[0..<count])
    }

    private func readHead() throws -> String {
        while true {
            if let end = String(decoding: pending, as: UTF8.self).range(of: "\r\n\r\n") {
                let head = String(String(decoding: pending, as: UTF8.self)[..<end.lowerBound])
                pending.removeFirst(head.utf8.count + 4)
                return head
            }
            try fill()
        }
    }

    /// The next text message; nil when the server closed.
    func nextText() throws -> String? {
        var message: [UInt8] = []
        while true {
            let head = try take(2)
            let opcode = head[0] & 0x0F
            var length = Int(head[1] & 0x7F)
            if length == 126 { length = try take(2).reduce(0) { $0 << 8 | Int($1) } }
            if length == 127 { length = try take(8).reduce(0) { $0 << 8 | Int($1) } }
            let payload = try take(length)
            switch opcode {
            case 0x8: return nil
            case 0x9, 0xA: continue  // ping, pong
            default:
                message += payload
                if head[0] & 0x80 != 0 { return String(decoding: message, as: UTF8.self) }
            }
        }
    }

    private let closed = Mutex(false)

    /// Sends a close frame (masked, as a client must) and closes the socket,
    /// once: a second close(2) of the number could close a descriptor the
    /// process has opened since (another test's socket, which SwiftNIO then
    /// finds closed under it).
    func close() {
        guard closed.withLock({ was in defer { was = true }; return !was }) else { return }
        _ = try? send([0x88, 0x80, 1, 2, 3, 4])
        Foundation.close(fd)
    }
}
#endif
