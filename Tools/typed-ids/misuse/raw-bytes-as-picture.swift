// expect: cannot convert value of type 'Bytes32' to expected argument type 'PictureID'
import Chorus

func misuse(_ node: Node, bytes: Bytes32) async throws {
    try await node.deletePicture(bytes)
}
