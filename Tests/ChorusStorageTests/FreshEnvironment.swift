import ChorusStorage
import ChorusTestSupport
import Foundation

extension TempDir {
    /// A new LMDB environment in its own directory `name` under this one.
    func freshEnvironment(_ name: String, initialMapSize: Int = 1 << 20) throws -> Environment {
        try FileManager.default.createDirectory(atPath: store(name), withIntermediateDirectories: true)
        return try Environment(path: store(name), initialMapSize: initialMapSize)
    }
}
