import ChorusEvents

/// Errors of the node's own: the store, its keys, and refusals. Messages
/// say what is wrong in the library's terms; the command-line tools add
/// what to type.
public enum NodeError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No store at the path (`chorus init` makes one): `not_initialized`.
    case notInitialized(path: String)
    /// `create` where a store already is: `already_initialized`.
    case alreadyInitialized(path: String)
    /// Another process writes the store (its writer lock is held): `store_in_use`.
    case storeInUse(path: String)
    /// Another process has the store open (even only to read it), so its
    /// file cannot be replaced (`Node.compact`): `store_open_elsewhere`.
    case storeOpenElsewhere(path: String, pid: Int32)
    /// A compacted copy did not hold what the store holds; the store was
    /// left as it was: `compaction_check_failed`.
    case compactionCheckFailed(path: String, detail: String)
    /// A write on a store opened read-only: `read_only`.
    case readOnly
    /// A key file that cannot be read or is not a key: `key_file`.
    case keyFile(path: String, problem: String)
    /// A call that needs the user key on a device-only store: `no_user_key`.
    case noUserKey
    /// An event this node signed that its own checks refused (a bug, never expected): `own_event_refused`.
    case ownEventRefused(String)
    /// A coin credit on a store that holds no issuer key: `no_issuer_key`.
    case noIssuerKey
    /// Projections of another format, on a store opened read-only (a writable open folds them again): `projections_stale`.
    case projectionsStale(path: String)
    /// The node refused the mutation before signing anything (`Refusal`).
    case refused(Refusal)
    /// A store location given as a URL that is not a file URL: `not_a_file_url`.
    case notAFileURL(String)

    /// A sentence for people saying what is wrong, in the library's terms.
    public var description: String {
        switch self {
        case .notInitialized(let path):
            "no Chorus store at \(path)"
        case .alreadyInitialized(let path):
            "\(path) already holds a Chorus store; create a new one in another directory"
        case .storeInUse(let path):
            "the store at \(path) is in use by another process that writes to it; stop it, or read without writing"
        case .storeOpenElsewhere(let path, let pid):
            "the store at \(path) is open in another process (pid \(pid)); stop every process that reads or serves it, then retry"
        case .compactionCheckFailed(let path, let detail):
            "the compacted copy of \(path) did not match the store (\(detail)); the store was left unchanged"
        case .readOnly: "this node was opened read-only and cannot write"
        case .keyFile(let path, let problem): "key file \(path): \(problem)"
        case .noUserKey: "this store holds no user key, so it cannot sign user-level events (device added or removed)"
        case .ownEventRefused(let e): "the log refused this node's own event: \(e)"
        case .noIssuerKey:
            "this store holds no issuer key; only a network's issuer credits coins"
        case .projectionsStale(let path):
            "the projections in \(path) were built by another version or network configuration; open the store once for writing to rebuild them"
        case .refused(let why): why.description
        case .notAFileURL(let url): "\(url) is not a file URL; a store is a directory on this device"
        }
    }
}

extension NodeError {
    /// A stable, machine-readable name of the error, in snake case; for a
    /// refusal, the refusal's own code (`Refusal.code`).
    public var code: String {
        switch self {
        case .notInitialized: "not_initialized"
        case .alreadyInitialized: "already_initialized"
        case .storeInUse: "store_in_use"
        case .storeOpenElsewhere: "store_open_elsewhere"
        case .compactionCheckFailed: "compaction_check_failed"
        case .readOnly: "read_only"
        case .keyFile: "key_file"
        case .noUserKey: "no_user_key"
        case .ownEventRefused: "own_event_refused"
        case .noIssuerKey: "no_issuer_key"
        case .projectionsStale: "projections_stale"
        case .refused(let why): why.code
        case .notAFileURL: "not_a_file_url"
        }
    }
}
