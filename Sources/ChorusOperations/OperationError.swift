import ChorusBlobs
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusProjections
import ChorusStorage

/// How an operation ended without its result (Specs/api.md §5): a stable
/// `code` to branch on, a `message` for people, and the `kind` of failure,
/// which decides the HTTP status and the command line's exit status.
public struct OperationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, as a class of answers.
    public enum Kind: Sendable, Equatable {
        /// The request itself is wrong (a malformed id, a missing or unknown field, text too long): 400.
        case badInput
        /// The object it names is not held here: 404.
        case notFound
        /// It contradicts the object's current state (already added, nothing to remove, deleted): 409.
        case conflict
        /// The content is larger than allowed: 413.
        case tooLarge
        /// The rules refuse it (not the owner, beyond rights, not a member) or it was stored without effect: 422.
        case refused
        /// The node cannot serve it now (closed, read-only, store busy): 503.
        case unavailable
        /// Anything else (storage, I/O): 500.
        case failed
    }

    /// The class of failure.
    public let kind: Kind
    /// The stable, machine-readable name, in snake case (`beyond_rights`, `chat_unknown`, `bad_id`).
    public let code: String
    /// A sentence for people saying what was wrong and, where it helps, what to do.
    public let message: String

    /// A failure of `kind` with `code` and `message`.
    public init(_ kind: Kind, code: String, _ message: String) {
        self.kind = kind
        self.code = code
        self.message = message
    }

    /// The message.
    public var description: String { message }

    /// The HTTP status of this failure's answer.
    public var httpStatus: Int {
        switch kind {
        case .badInput: 400
        case .notFound: 404
        case .conflict: 409
        case .tooLarge: 413
        case .refused: 422
        case .unavailable: 503
        case .failed: 500
        }
    }

    /// `error` as an operation's failure: the library's errors keep their
    /// codes and messages; their kind follows from the case.
    public init(_ error: any Error) {
        switch error {
        case let e as OperationError: self = e
        case NodeError.refused(let why): self.init(Self.kind(of: why), code: why.code, why.description)
        case let e as NodeError: self.init(Self.kind(of: e), code: e.code, e.description)
        case let e as QueryError:
            switch e {
            case .badCursor: self.init(.badInput, code: e.code, e.description)
            case .unknownChat: self.init(.notFound, code: e.code, e.description)
            }
        case let e as StorageError:
            switch e {
            case .closed, .readOnly, .alreadyOpenInProcess: self.init(.unavailable, code: e.code, e.description)
            case .diskFull, .lmdb, .writeFailed, .cannotCreateDirectory: self.init(.failed, code: e.code, e.description)
            }
        case let e as LogError: self.init(.failed, code: e.code, e.description)
        case let e as BlobError: self.init(.failed, code: e.code, e.description)
        case let e as ProjectionError: self.init(.failed, code: e.code, e.description)
        case let e as EventError: self.init(.badInput, code: e.code, e.description)
        default: self.init(.failed, code: "internal", "\(error)")
        }
    }

    /// The kind of a refusal, case by case, so that a new refusal must be classed here.
    static func kind(of refusal: Refusal) -> Kind {
        switch refusal {
        case .invalidDeviceProof, .retiredProfileField, .incompleteDate, .emptyPicture, .notAnImage, .emptyMessage, .invalidRelayList,
            .textLength, .titleLength:
            .badInput
        case .pictureTooLarge: .tooLarge
        case .unknownPicture, .unknownChat, .unknownMessage, .noSuchSlot, .pictureBytesUnavailable: .notFound
        case .pictureDeleted, .noRoomBetweenPictures, .alreadyAdded, .nothingToRemove, .pictureNotInGallery: .conflict
        case .pictureNotYours, .cannotFollowYourself, .cannotBlockYourself, .notYourMessage, .messageNotInChat, .noKnownDevice,
            .insufficientRights, .unusableMemberKey, .chatUnreadable:
            .refused
        }
    }

    /// The kind of a node error, case by case.
    static func kind(of error: NodeError) -> Kind {
        switch error {
        case .refused(let why): kind(of: why)
        case .notInitialized, .alreadyInitialized, .keyFile, .notAFileURL, .compactionCheckFailed, .ownEventRefused: .failed
        case .storeInUse, .storeOpenElsewhere, .readOnly, .projectionsStale: .unavailable
        case .noUserKey, .noIssuerKey: .refused
        }
    }

    /// A value given for `what` that is not an id (64 hex digits).
    public static func badID(_ text: String, what: String) -> OperationError {
        OperationError(.badInput, code: "bad_id", "\(what) must be 64 hex digits, got \"\(text.prefix(80))\"")
    }
}
