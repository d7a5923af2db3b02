import Foundation

/// What a `chorus` client sends to have the serving process run one command
/// line on its open node (Specs/api.md §4).
public struct CommandRequest: Codable, Sendable, Equatable {
    /// The arguments after `chorus`, as typed.
    public var arguments: [String]
    /// The client's working directory: relative paths in the arguments are the client's.
    public var workingDirectory: String
    /// Whether the client's stderr is a terminal (progress bars are drawn only then).
    public var errorIsTerminal: Bool
    /// The client's `CHORUS_STORE`.
    public var storeVariable: String?
    /// A file the client spooled its standard input into, for `import -`.
    public var standardInputFile: String?

    public init(
        arguments: [String], workingDirectory: String, errorIsTerminal: Bool = false, storeVariable: String? = nil,
        standardInputFile: String? = nil
    ) {
        self.arguments = arguments
        self.workingDirectory = workingDirectory
        self.errorIsTerminal = errorIsTerminal
        self.storeVariable = storeVariable
        self.standardInputFile = standardInputFile
    }
}

/// Runs one command line for a client, writing its standard output and error
/// through the two functions; returns the exit status.
public typealias CommandRunner = @Sendable (
    _ request: CommandRequest, _ output: @escaping @Sendable (Data) -> Void, _ error: @escaping @Sendable (Data) -> Void
) async -> Int32

/// One frame of a command's response stream (Specs/api.md §4.2): a type
/// byte, the payload's length as 4 bytes big-endian, the payload. Output and
/// error frames carry bytes as written; the last frame is the exit status.
public enum CommandFrame: Equatable, Sendable {
    case output(Data)
    case error(Data)
    case exit(Int32)
    /// Sent while a command runs silently, so that a client that went away is noticed; clients ignore it.
    case heartbeat

    public static let mediaType = "application/vnd.chorus.command-stream"
    /// The largest payload a frame may carry; a longer write is split.
    public static let maxPayload = 1 << 20

    public var encoded: Data {
        let (type, payload): (UInt8, Data) =
            switch self {
            case .output(let d): (1, d)
            case .error(let d): (2, d)
            case .exit(let status): (3, withUnsafeBytes(of: UInt32(bitPattern: status).bigEndian) { Data($0) })
            case .heartbeat: (4, Data())
            }
        var out = Data([type])
        withUnsafeBytes(of: UInt32(payload.count).bigEndian) { out.append(contentsOf: $0) }
        out.append(payload)
        return out
    }

    public enum DecodingError: Error, CustomStringConvertible {
        case unknownType(UInt8)
        case tooLarge(Int)
        case badExit

        public var description: String {
            switch self {
            case .unknownType(let t): "the server sent a command frame of unknown type \(t)"
            case .tooLarge(let n): "the server sent a command frame of \(n) bytes (at most \(CommandFrame.maxPayload))"
            case .badExit: "the server sent an exit frame whose payload is not 4 bytes"
            }
        }
    }

    /// Takes the complete frames off the front of `buffer`, leaving a partial one.
    public static func decode(from buffer: inout Data) throws -> [CommandFrame] {
        var frames: [CommandFrame] = []
        var start = buffer.startIndex
        while buffer.endIndex - start >= 5 {
            let type = buffer[start]
            let length = buffer[(start + 1)..<(start + 5)].reduce(0) { $0 << 8 | Int($1) }
            guard length <= maxPayload else { throw DecodingError.tooLarge(length) }
            guard buffer.endIndex - start >= 5 + length else { break }
            let payload = Data(buffer[(start + 5)..<(start + 5 + length)])
            switch type {
            case 1: frames.append(.output(payload))
            case 2: frames.append(.error(payload))
            case 3:
                guard payload.count == 4 else { throw DecodingError.badExit }
                frames.append(.exit(Int32(bitPattern: payload.reduce(0) { $0 << 8 | UInt32($1) })))
            case 4: frames.append(.heartbeat)
            default: throw DecodingError.unknownType(type)
            }
            start += 5 + length
        }
        buffer = Data(buffer[start...])
        return frames
    }

    /// `data` as output or error frames of at most `maxPayload` bytes each.
    static func split(_ data: Data, _ make: (Data) -> CommandFrame) -> [CommandFrame] {
        stride(from: 0, to: data.count, by: maxPayload).map { offset in
            let from = data.startIndex + offset
            return make(Data(data[from..<min(data.endIndex, from + maxPayload)]))
        }
    }
}
