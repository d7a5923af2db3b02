import Foundation
import Synchronization

/// A child process started with `posix_spawn`, for tests: the part of
/// Foundation's `Process` the tests use, without its `run()`. On Linux that
/// `run()` reads the names under /proc/self/fd by copying whole 256-byte
/// `dirent` names, past the end of glibc's buffer, and crashes the test
/// process now and then (swift-corelibs-foundation pull request 5472, after
/// Swift 6.3.1); a test process holding many sockets and stores meets it.
/// The child inherits no descriptor but its standard three, runs in a
/// process group of its own, with default signal actions and no signal
/// blocked (a test that ignores SIGPIPE must not pass that on).
public final class ChildProcess: @unchecked Sendable {
    public enum TerminationReason: Sendable { case exit, uncaughtSignal }

    /// Set before `run()`, as on `Process`. A standard stream is a `Pipe`
    /// (the child gets its far end, closed here once started), a
    /// `FileHandle` (`FileHandle.nullDevice` for /dev/null), or nil (this
    /// process's own).
    public var executableURL: URL?
    public var arguments: [String]?
    public var environment: [String: String]?
    public var currentDirectoryURL: URL?
    public var standardInput: Any?
    public var standardOutput: Any?
    public var standardError: Any?

    private struct State {
        var pid: pid_t = 0
        /// The raw `waitpid` status once the child has been reaped.
        var status: Int32?
    }
    private let state = Mutex(State())

    public init() {}

    public var processIdentifier: Int32 { state.withLock { $0.pid } }

    public func run() throws {
        guard let executableURL else { throw TestFailure("ChildProcess.run: no executableURL") }
        let path = executableURL.path
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }

        var closeHere: [FileHandle] = []
        for (stream, target) in [(standardInput, Int32(0)), (standardOutput, 1), (standardError, 2)] {
            switch stream {
            case nil: break
            case let pipe as Pipe:
                let far = target == 0 ? pipe.fileHandleForReading : pipe.fileHandleForWriting
                try check(posix_spawn_file_actions_adddup2(&actions, far.fileDescriptor, target), "dup2")
                closeHere.append(far)
            case let handle as FileHandle where handle === FileHandle.nullDevice:
                try check(posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0), "open /dev/null")
            case let handle as FileHandle:
                try check(posix_spawn_file_actions_adddup2(&actions, handle.fileDescriptor, target), "dup2")
            default:
                throw TestFailure("ChildProcess.run: a standard stream must be a Pipe or a FileHandle")
            }
        }
        try check(Self.closeFrom(&actions, 3), "closefrom")
        if let directory = currentDirectoryURL?.path {
            try check(directory.withCString { Self.changeDirectory(&actions, $0) }, "chdir")
        }

        var defaults = sigset_t()
        sigfillset(&defaults)
        var mask = sigset_t()
        sigemptyset(&mask)
        try check(posix_spawnattr_setsigdefault(&attributes, &defaults), "sigdefault")
        try check(posix_spawnattr_setsigmask(&attributes, &mask), "sigmask")
        try check(posix_spawnattr_setpgroup(&attributes, 0), "pgroup")
        try check(posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP)), "flags")

        let argv = [path] + (arguments ?? [])
        let env = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var pid: pid_t = 0
        let spawned = withCStrings(argv) { argvPointers in
            withCStrings(env) { envPointers in posix_spawn(&pid, path, &actions, &attributes, argvPointers, envPointers) }
        }
        guard spawned == 0 else {
            throw TestFailure("cannot start \(path): \(String(cString: strerror(spawned)))")
        }
        state.withLock { $0.pid = pid }
        for handle in closeHere { try? handle.close() }
    }

    /// Whether the child still runs (reaping it when it has ended).
    public var isRunning: Bool { reap(blocking: false) == nil }

    /// Blocks the calling thread until the child ends.
    public func waitUntilExit() { _ = reap(blocking: true) }

    /// SIGKILL, then reaped on a thread of its own: for a test's cleanup
    /// (a `defer`, which cannot await), so no cooperative thread waits.
    public func killAndReapAside() {
        signal(SIGKILL)
        Thread { self.waitUntilExit() }.start()
    }

    /// The exit code, or the signal that ended it (as on `Process`).
    public var terminationStatus: Int32 {
        guard let status = reap(blocking: false) else { return 0 }
        return Self.exited(status) ? (status >> 8) & 0xFF : status & 0x7F
    }

    public var terminationReason: TerminationReason {
        guard let status = reap(blocking: false) else { return .exit }
        return Self.exited(status) ? .exit : .uncaughtSignal
    }

    /// Waits up to `limit` for the child to end, polling between sleeps
    /// (a cooperative thread is never held), and SIGKILLs it after that.
    /// True when it ended within the limit.
    @discardableResult
    public func exit(within limit: Duration = .seconds(120)) async -> Bool {
        let deadline = ContinuousClock.now + limit
        while isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
        guard isRunning else { return true }
        signal(SIGKILL)
        while isRunning { try? await Task.sleep(for: .milliseconds(10)) }
        return false
    }

    /// SIGTERM, as `Process.terminate()`.
    public func terminate() { signal(SIGTERM) }

    public func signal(_ number: Int32) {
        let pid = processIdentifier
        guard pid > 0, isRunning else { return }
        kill(pid, number)
    }

    /// The raw status once the child has ended, nil while it runs. One
    /// lock around `waitpid`: two callers can never both reap, so neither
    /// meets ECHILD for a child the other just reaped.
    private func reap(blocking: Bool) -> Int32? {
        while true {
            let result: Int32?? = state.withLock { s in
                if let status = s.status { return .some(status) }
                guard s.pid > 0 else { return .some(nil) }
                var raw: Int32 = 0
                let r = waitpid(s.pid, &raw, WNOHANG)
                if r == s.pid {
                    s.status = raw
                    return .some(raw)
                }
                return r == 0 ? .some(nil) : .none  // .none: interrupted, try again
            }
            switch result {
            case .some(let status?): return status
            case .some(nil): if !blocking { return nil }
            case .none: break
            }
            if blocking { usleep(2_000) }
        }
    }

    private static func exited(_ status: Int32) -> Bool { status & 0x7F == 0 }

    private func check(_ code: Int32, _ what: String) throws {
        guard code == 0 else { throw TestFailure("ChildProcess.run: posix_spawn \(what) failed: \(String(cString: strerror(code)))") }
    }

    // glibc declares these only for _GNU_SOURCE, which Swift's Glibc module
    // does not define: looked up by name (glibc 2.34 and later).
    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private typealias ChangeDirectory = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32

    private static func closeFrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32) -> Int32 {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else { return ENOSYS }
        return unsafeBitCast(symbol, to: CloseFrom.self)(actions, from)
    }

    private static func changeDirectory(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ path: UnsafePointer<CChar>) -> Int32 {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addchdir_np") else { return ENOSYS }
        return unsafeBitCast(symbol, to: ChangeDirectory.self)(actions, path)
    }
}

/// `body` with `strings` as a NULL-terminated array of C strings.
private func withCStrings<R>(_ strings: [String], _ body: ([UnsafeMutablePointer<CChar>?]) -> R) -> R {
    let pointers = strings.map { strdup($0) }
    defer { pointers.forEach { free($0) } }
    return body(pointers + [nil])
}
