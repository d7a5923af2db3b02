import ChorusCommands
import Foundation

// `chorus`: every command lives in ChorusCommands (the local API runs the same ones).
Foundation.exit(await ChorusProgram.run(Array(CommandLine.arguments.dropFirst())))
