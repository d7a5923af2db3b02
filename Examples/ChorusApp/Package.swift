// swift-tools-version: 6.1
// An app that embeds Chorus the way an app developer would: a separate
// package that depends on the library by path and imports only `Chorus`.
// `Tools/test` builds and runs it; the README's embedding section is its
// `main.swift`, verbatim.
import PackageDescription

let package = Package(
    name: "ChorusApp",
    platforms: [.macOS(.v15), .iOS(.v18)],
    dependencies: [.package(name: "Chorus", path: "../..")],
    targets: [
        .executableTarget(name: "ChorusApp", dependencies: [.product(name: "Chorus", package: "Chorus")])
    ]
)
