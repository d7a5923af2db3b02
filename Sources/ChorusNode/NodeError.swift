import ChorusEvents

public enum NodeError: Error, Sendable, Equatable, CustomStringConvertible {
    case notInitialized(path: String)
    case alreadyInitialized(path: String)
    case storeInUse(path: String)
    case readOnly
    case closed
    case keyFile(path: String, problem: String)
    case noUserKey
    case ownEventRefused(EventError)
    case noIssuerKey
    case projectionsStale(path: String)
    /// The node refused the mutation before signing anything (`Refusal`).
    case refused(Refusal)

    public var description: String {
        switch self {
        case .notInitialized(let path):
            "no Chorus store at \(path); run `chorus init` to create one, or pass --store DIR (or set CHORUS_STORE)"
        case .alreadyInitialized(let path):
            "\(path) already holds a Chorus store; pick another directory with --store to create a new one"
        case .storeInUse(let path):
            "the store at \(path) is in use by another process that writes to it; stop it, or read without writing"
        case .readOnly: "this node was opened read-only and cannot write"
        case .closed: "this node has been closed"
        case .keyFile(let path, let problem): "key file \(path): \(problem)"
        case .noUserKey: "this store holds no user key, so it cannot sign user-level events (device added or removed)"
        case .ownEventRefused(let e): "the log refused this node's own event: \(e)"
        case .noIssuerKey:
            "this store holds no issuer key; only a network's issuer credits coins (create one with `chorus issuer create`)"
        case .projectionsStale(let path):
            "the projections in \(path) were built by another version or network configuration; open the store once for writing (any `chorus` command that writes, or `chorus rebuild`) to rebuild them"
        case .refused(let why): why.description
        }
    }
}
