import Foundation

/// The standard streams of the `chorus` command being run. Normally this
/// process's own; when a serving node runs a command for a `chorus` client
/// (Specs/api.md §4), the client's, across the local API: the command prints
/// the same bytes either way.
public struct CommandStreams: Sendable {
    /// Standard output (text and binary, such as `picture get` or `export -`).
    public let writeOutput: @Sendable (Data) -> Void
    /// Standard error (messages and progress).
    public let writeError: @Sendable (Data) -> Void
    /// Whether the client's stderr is a terminal (progress bars are drawn only then).
    public let errorIsTerminal: Bool
    /// The client's working directory: relative paths in arguments are the client's.
    public let workingDirectory: String
    /// A file holding what the client read from its standard input, for
    /// commands that read it (`import -`).
    public let standardInputFile: String?
    /// The client's `CHORUS_STORE`, which decides the store when `--store` is absent.
    public let storeVariable: String?

    public init(
        writeOutput: @escaping @Sendable (Data) -> Void, writeError: @escaping @Sendable (Data) -> Void, errorIsTerminal: Bool,
        workingDirectory: String, standardInputFile: String?, storeVariable: String?
    ) {
        self.writeOutput = writeOutput
        self.writeError = writeError
        self.errorIsTerminal = errorIsTerminal
        self.workingDirectory = workingDirectory
        self.standardInputFile = standardInputFile
        self.storeVariable = storeVariable
    }
}

public enum Console {
    /// Set while a command runs on behalf of a client; nil for the process's own streams.
    @TaskLocal public static var streams: CommandStreams?

    public static func write(_ data: Data) {
        if let streams { streams.writeOutput(data) } else { FileHandle.standardOutput.write(data) }
    }

    public static func writeError(_ data: Data) {
        if let streams { streams.writeError(data) } else { FileHandle.standardError.write(data) }
    }

    public static var errorIsTerminal: Bool { streams?.errorIsTerminal ?? (isatty(2) == 1) }

    /// A path given on the command line, made absolute against the client's
    /// working directory when a command runs for a client.
    public static func path(_ path: String) -> String {
        guard let streams, !path.hasPrefix("/") else { return path }
        return streams.workingDirectory + "/" + path
    }

    /// The value of an environment variable the command depends on: the client's, when it runs for one.
    public static var storeVariable: String? {
        if let streams { return streams.storeVariable }
        return ProcessInfo.processInfo.environment["CHORUS_STORE"]
    }
}

/// `print` for command output: a line on the command's standard output.
public func emit(_ text: String) {
    Console.write(Data((text + "\n").utf8))
}
