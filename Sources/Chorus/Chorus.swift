// The library an app embeds: `import Chorus` brings the node, its queries
// and their views, ids and keys, chat content and sync.
@_exported import ChorusCrypto
@_exported import ChorusEncryption
@_exported import ChorusEvents
@_exported import ChorusNode
@_exported import ChorusProjections
@_exported import ChorusSync
