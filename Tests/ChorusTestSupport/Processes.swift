import Foundation
import Synchronization

/// A fresh directory under the system temp dir, removed by `cleanup`.
public struct TempDir: Sendable {
    public let path: String
    public init() {
        path = NSTemporaryDirectory() + "chorus-test-" + UUID().uuidString
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    public func store(_ name: String) -> String { path + "/" + name }
    public func cleanup() { try? FileManager.default.removeItem(atPath: path) }
}

/// Where SwiftPM put the executables built with the tests.
public func productPath(_ name: String) throws -> String {
    let argv0 = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    var dir = argv0.deletingLastPathComponent()
    for _ in 0..<4 {
        let candidate = dir.appendingPathComponent(name).path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        dir = dir.deletingLastPathComponent()
    }
    let fallback = repositoryRoot.appendingPathComponent(".build/debug/\(name)").path
    guard FileManager.default.isExecutableFile(atPath: fallback) else {
        throw TestFailure("cannot find the \(name) executable next to \(argv0.path)")
    }
    return fallback
}

public struct TestFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ d: String) { description = d }
}

public struct CommandResult: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String

    public init(status: Int32, stdout: String, stderr: String) {
        self.status = status
        self.stdout = stdout
        self.stderr = stderr
    }
}

/// Runs a command to completion, capturing its output; `input` is its
/// standard input (none when nil), `directory` its working directory.
/// Blocks the calling thread: for threads of a test's own (`runCommand`
/// from a task).
public func runCommandSync(
    _ path: String, _ arguments: [String], environment: [String: String] = [:], input: Data? = nil, directory: String? = nil
) throws -> CommandResult {
    let process = ChildProcess()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    env["CHORUS_STORE"] = nil
    for (k, v) in environment { env[k] = v }
    process.environment = env
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
    let inputPipe = input.map { _ in Pipe() }
    process.standardInput = inputPipe ?? FileHandle.nullDevice
    try process.run()
    if let inputPipe, let input {
        // A child that exits before reading all of it must not end the test process with SIGPIPE.
        signal(SIGPIPE, SIG_IGN)
        // Written from a thread of its own: a child that does not read its input cannot block the test.
        Thread {
            try? inputPipe.fileHandleForWriting.write(contentsOf: input)
            try? inputPipe.fileHandleForWriting.close()
        }.start()
    }
    // Read both pipes to the end before waiting, so a full pipe cannot block the child.
    let errData = Mutex(Data())
    let errReader = Thread { errData.withLock { $0 = err.fileHandleForReading.readDataToEndOfFile() } }
    errReader.start()
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    while errReader.isExecuting || !errReader.isFinished { usleep(1000) }
    return CommandResult(
        status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
        stderr: errData.withLock { String(decoding: $0, as: UTF8.self) })
}

/// `runCommandSync` on a thread of its own (`offThePool`), awaited: a test
/// waiting for a child must not hold a cooperative thread.
public func runCommand(
    _ path: String, _ arguments: [String], environment: [String: String] = [:], input: Data? = nil, directory: String? = nil
) async throws -> CommandResult {
    try await offThePool { try runCommandSync(path, arguments, environment: environment, input: input, directory: directory) }
}

/// A plain TCP connection to 127.0.0.1:`port` (no handshake): its file
/// descriptor, or nil when it cannot connect. The caller closes it.
public func rawTCPConnection(port: Int) -> Int32? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else {
        close(fd)
        return nil
    }
    return fd
}

/// Mounts a tmpfs of `size` (mount's notation: "2m") at `path`, a new
/// directory, for a full-disk test; false where this machine refuses (the
/// mount needs root, and some containers forbid mounts). The test unmounts
/// it (`unmountSmallDisk`).
public func mountSmallDisk(at path: String, size: String) -> Bool {
    guard (try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)) != nil,
        let mounted = try? runCommandSync("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", path])
    else { return false }
    return mounted.status == 0
}

/// Unmounts what `mountSmallDisk` mounted at `path` (lazily: a store still
/// open there does not keep it).
public func unmountSmallDisk(at path: String) { _ = try? runCommandSync("/bin/umount", ["-l", path]) }

/// Runs `body` with a tmpfs of `size` mounted at `path` (`mountSmallDisk`)
/// and unmounts it after; where this machine refuses the mount, says so and
/// skips `body`.
public func withSmallDisk(at path: String, size: String, _ body: () async throws -> Void) async rethrows {
    guard mountSmallDisk(at: path, size: size) else {
        print("full-disk test skipped: this machine refused to mount a tmpfs")  // some containers forbid mounts
        return
    }
    defer { unmountSmallDisk(at: path) }
    try await body()
}

/// The permission bits of the file at `path` (0o600: its owner's alone).
public func fileMode(_ path: String) throws -> Int? {
    try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
}
