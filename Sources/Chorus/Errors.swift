import ChorusBlobs
import ChorusCBOR
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusProjections
import ChorusStorage
import ChorusSync

/// What every error the library throws offers an app: a stable,
/// machine-readable `code` in snake case to branch on, and a `message` for
/// people. A refusal's code is the one the projections record for the same
/// decision (Specs/projections.md §4), and the one `chorus` prints in
/// brackets after a refusal:
///
///     do { try await node.spendCoins(30, for: "a gift") }
///     catch let error as any ChorusError where error.code == "beyond_rights" { … }
public protocol ChorusError: Error, Sendable {
    /// The error's stable name, such as `beyond_rights` or `not_initialized`.
    var code: String { get }
    /// A sentence for people saying what is wrong, in the library's terms.
    var message: String { get }
}

extension ChorusError {
    /// The error's description.
    public var message: String { String(describing: self) }
}

/// The store's errors (a full disk, a closed store: `closed` after
/// `close()`, whatever the call), nameable with `import Chorus` alone.
public typealias StorageError = ChorusStorage.StorageError
/// The event log's errors (a damaged log entry, an append the log refuses).
public typealias LogError = ChorusLog.LogError
/// The blob store's errors (a blob whose bytes do not match their hash).
public typealias BlobError = ChorusBlobs.BlobError

extension CBORError: ChorusError {}
extension EventError: ChorusError {}
extension NodeError: ChorusError {}
extension Refusal: ChorusError {}
extension StorageError: ChorusError {}
extension LogError: ChorusError {}
extension ProjectionError: ChorusError {}
extension NetworkConfigError: ChorusError {}
extension QueryError: ChorusError {}
extension BlobError: ChorusError {}
extension SyncError: ChorusError {}
extension SecureConnectionError: ChorusError {}
extension MemoryTransportError: ChorusError {}
