#if Service
import ChorusEvents
import ChorusNode
import ChorusOperations
import Foundation

/// The OpenAPI 3.1 description of the local API, made from the same route
/// table the server uses, so the two cannot disagree. `Specs/api.openapi.json`
/// is this document; a test checks it byte for byte.
public enum OpenAPIDocument {
    /// One name, one type, across every endpoint (Specs/api.md §5): these
    /// parameters and body fields are ids (64 hex digits, either case).
    static let idNames: Set<String> = ["id", "object", "user", "device", "author", "picture", "before", "after", "message", "chat"]
    static var id: [String: Any] { ["type": "string", "pattern": "^[0-9a-fA-F]{64}$"] }

    public static func make() -> [String: Any] {
        var paths: [String: [String: Any]] = [:]
        for route in CommandRoute.all {
            paths[route.path, default: [:]][route.method.rawValue.lowercased()] = operation(route)
        }
        paths["/v1/run"] = ["post": runOperation()]
        paths["/health"] = [
            "get": [
                "operationId": "health", "summary": "Whether the node serves (no token needed, also on TCP)", "security": [] as [Any],
                "responses": [
                    "200": jsonResponse("The node serves", schema: ["type": "object", "properties": ["status": ["const": "ok"]]]),
                    "503": jsonResponse("The store or its writer does not answer", schema: ["type": "object"]),
                    "421": hostRefused(),
                ],
            ] as [String: Any]
        ]
        paths["/metrics"] = [
            "get": [
                "operationId": "metrics", "summary": "Prometheus metrics (text exposition format)",
                "responses": [
                    "200": ["description": "Metrics", "content": ["text/plain": ["schema": ["type": "string"]]]], "401": unauthorized(),
                    "421": hostRefused(),
                ],
            ] as [String: Any]
        ]
        paths["/v1/watch"] = ["get": watchOperation()]
        paths["/v1/watch/ws"] = [
            "get": [
                "operationId": "watchOverWebSocket",
                "summary":
                    "A WebSocket (Upgrade: websocket): the JSON of a GET endpoint as text messages {\"id\", \"data\"} (or {\"id\", \"error\"}), first at once and again whenever a commit changes it (Specs/api.md §6)",
                "parameters": [
                    ["name": "path", "in": "query", "required": true, "schema": ["type": "string"], "description": "A GET endpoint with its query, e.g. /v1/chats/ID?limit=50"],
                    ["name": "lastEventId", "in": "query", "required": false, "schema": ["type": "string"], "description": "The id of the answer the client holds: not sent again"],
                ] as [[String: Any]],
                "responses": [
                    "101": ["description": "Switched to the WebSocket protocol"],
                    "400": jsonResponse(
                        "Not a WebSocket request, or not a GET endpoint of this API (an upgrade the server declines is answered 400 with no body)",
                        schema: ["$ref": "#/components/schemas/Error"]),
                    "401": unauthorized(), "421": hostRefused(),
                ],
            ] as [String: Any]
        ]
        paths["/v1/session"] = [
            "post": [
                "operationId": "createPageSession",
                "summary":
                    "TCP only: a page session (Specs/api.md §3.1) for the page of this API's own origin, made with the API token; send it as Authorization: Bearer SESSION on same-origin requests",
                "responses": [
                    "200": jsonResponse(
                        "The session",
                        schema: [
                            "type": "object", "required": ["session", "expires_in"],
                            "properties": ["session": ["type": "string"], "expires_in": ["type": "integer"]],
                        ]),
                    "403": jsonResponse("Asked from another origin", schema: ["$ref": "#/components/schemas/Error"]),
                    "401": unauthorized(), "421": hostRefused(),
                ],
            ] as [String: Any],
            "delete": [
                "operationId": "endPageSession", "summary": "TCP only: ends the page session that authorizes the request",
                "responses": [
                    "204": ["description": "Ended"], "401": unauthorized(), "421": hostRefused(),
                    "400": jsonResponse("Authorized by the API token, which is no page session", schema: ["$ref": "#/components/schemas/Error"]),
                    "403": jsonResponse("Asked from another origin", schema: ["$ref": "#/components/schemas/Error"]),
                ],
            ] as [String: Any],
        ]
        return [
            "openapi": "3.1.0",
            "info": [
                "title": "Chorus node local API", "version": "1",
                "description":
                    "The API of a running `chorus serve` (Specs/api.md). Each endpoint under /v1 runs a typed operation, the one the `chorus` command named in its description runs, and answers what that command prints with --json. The status follows the failure's kind (400 bad input, 404 unknown object, 409 conflict, 413 too large, 422 refused by the rules or stored without effect, 503 unavailable). Every error body is {\"code\", \"message\"}; an unknown path answers 404, another method 405 with Allow.",
            ],
            "servers": [["url": "http://localhost", "description": "the Unix socket api.sock in the store directory, or the TCP address given with --api-listen"]],
            "components": [
                "securitySchemes": ["bearer": ["type": "http", "scheme": "bearer", "description": "keys/api.token in the store; needed on TCP only"]],
                "schemas": sharedSchemas(),
            ],
            "security": [["bearer": [] as [Any]]],
            "paths": paths,
        ]
    }

    /// The document as the committed file holds it: sorted keys, two-space indentation, a final newline.
    public static func rendered() throws -> Data {
        let data = try JSONSerialization.data(withJSONObject: make(), options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        return data + Data("\n".utf8)
    }

    /// `Error` and the shapes answers share (`JSONSchema.components`).
    static func sharedSchemas() -> [String: Any] {
        var schemas: [String: Any] = [
            "Error": [
                "type": "object", "required": ["code", "message"],
                "description": "A failure (Specs/api.md §5). A failure that carries data (a mutation stored without effect, a picture this node does not hold) adds the fields of the answer after these two.",
                "properties": [
                    "code": ["type": "string", "description": "The stable, machine-readable name of the failure (Specs/api.md §5)"],
                    "message": ["type": "string", "description": "What was wrong, for people"],
                ],
            ] as [String: Any]
        ]
        for (name, schema) in JSONSchema.components { schemas[name] = foundation(schema.json) }
        return schemas
    }

    /// A JSON value as JSONSerialization takes it.
    static func foundation(_ value: JSONValue) -> Any {
        switch value {
        case .string(let s): s
        case .int(let n): n
        case .uint(let n): n
        case .bool(let b): b
        case .null: NSNull()
        case .array(let items): items.map(foundation)
        case .object(let pairs): Dictionary(pairs.map { ($0.0, foundation($0.1)) }, uniquingKeysWith: { first, _ in first })
        }
    }

    static func operationID(_ route: CommandRoute) -> String {
        let words = route.arguments.compactMap { if case .word(let w) = $0, !w.hasPrefix("-") { w } else { nil } }
        return words.enumerated().map { i, w in
            let parts = w.split(separator: "-").map(String.init)
            return parts.enumerated().map { j, p in i == 0 && j == 0 ? p : p.prefix(1).uppercased() + p.dropFirst() }.joined()
        }.joined()
    }

    static func operation(_ route: CommandRoute) -> [String: Any] {
        var parameters: [[String: Any]] = []
        var properties: [String: Any] = [:]
        var required: [String] = []
        for argument in route.arguments {
            switch argument {
            case .path(let name):
                let schema: [String: Any] = name == "slot" ? ["type": "integer"] : idNames.contains(name) ? id : ["type": "string"]
                parameters.append(["name": name, "in": "path", "required": true, "schema": schema])
            case .query(let name), .queryOption(let name, _):
                // A query's `before` is a page cursor, not a picture.
                let schema: [String: Any] =
                    switch name {
                    case "limit", "offset", "since": ["type": "integer", "minimum": 0]
                    case "kind": ["enum": EventKind.known.map(\.name)]
                    case "format": ["enum": ["cbor", "jsonl"]]
                    case "before": ["type": "string"]
                    default: idNames.contains(name) ? id : ["type": "string"]
                    }
                parameters.append(["name": name, "in": "query", "required": false, "schema": schema])
            case .queryFlag(let name, _):
                parameters.append(["name": name, "in": "query", "required": false, "schema": ["type": "boolean"]])
            case .field(let name):
                properties[name] = fieldSchema(name)
                required.append(name)
            case .optionalField(let name), .fieldOption(let name, _):
                properties[name] = fieldSchema(name)
            case .fieldFlag(let name, _):
                properties[name] = ["type": "boolean"]
            case .word, .upload, .dash: break
            }
        }
        let command = "chorus " + route.arguments.compactMap { if case .word(let w) = $0, !w.hasPrefix("-") { w } else { nil } }.joined(separator: " ")
        let description =
            route.json
            ? "A typed operation; answers what `\(command) --json` prints." : "A typed operation; the body is the bytes `\(command)` writes."
        var operation: [String: Any] = [
            "operationId": operationID(route), "summary": route.summary, "description": description, "responses": responses(route),
        ]
        if !parameters.isEmpty { operation["parameters"] = parameters }
        if route.needsUpload {
            operation["requestBody"] = [
                "required": true, "content": ["application/octet-stream": ["schema": ["type": "string", "format": "binary"]]],
            ]
        } else if !properties.isEmpty {
            var schema: [String: Any] = ["type": "object", "properties": properties, "additionalProperties": false]
            if !required.isEmpty { schema["required"] = required }
            operation["requestBody"] = ["required": !required.isEmpty, "content": ["application/json": ["schema": schema]]]
        }
        return operation
    }

    static func fieldSchema(_ name: String) -> [String: Any] {
        switch name {
        case "members": ["type": "array", "items": id]
        case "relays": ["type": "array", "items": ["type": "string"]]
        case "amount": ["anyOf": [["type": "integer", "minimum": 1], ["type": "string", "pattern": "^[0-9]+$"]]]
        case "hops": ["anyOf": [["type": "integer", "minimum": 0], ["type": "string", "pattern": "^[0-9]+$"]]]
        case "field": ["enum": ProfileField.settable.map(\.rawValue)]
        default: idNames.contains(name) ? id : ["type": "string"]
        }
    }

    static func unauthorized() -> [String: Any] {
        jsonResponse("On TCP without the bearer token or a page session", schema: ["$ref": "#/components/schemas/Error"])
    }

    static func hostRefused() -> [String: Any] {
        jsonResponse("A Host this API does not answer to (chorus serve --api-host)", schema: ["$ref": "#/components/schemas/Error"])
    }

    static func jsonResponse(_ description: String, schema: [String: Any]) -> [String: Any] {
        ["description": description, "content": ["application/json": ["schema": schema]]]
    }

    static func responses(_ route: CommandRoute) -> [String: Any] {
        let error = ["$ref": "#/components/schemas/Error"]
        let paged = route.arguments.contains { if case .queryOption("after", _) = $0 { true } else { false } }
        let ok: [String: Any] =
            if let schema = route.answerSchema {
                jsonResponse("What `--json` prints", schema: foundation(schema.json) as? [String: Any] ?? [:])
                    .merging(
                        paged
                            ? [
                                "headers": [
                                    "Link": [
                                        "description": "On a page that is not the last: `<PATH?…&after=LAST>; rel=\"next\"`, the request for the next page",
                                        "schema": ["type": "string"],
                                    ] as [String: Any]
                                ]
                            ] : [:], uniquingKeysWith: { a, _ in a })
            } else {
                [
                    "description": "The bytes the command writes (a picture's own media type when it names one)",
                    "content": [
                        "application/octet-stream": ["schema": ["type": "string", "format": "binary"]],
                        "image/*": ["schema": ["type": "string", "format": "binary"]],
                    ],
                ]
            }
        let refused = jsonResponse(
            "Refused by the rules, or stored without effect: the error, followed for a stored mutation by its report (effective false, reason)",
            schema: error)
        // What every endpoint can answer besides its own outcomes (Specs/api.md §3, §5).
        var out: [String: Any] = [
            "200": ok, "422": refused,
            "401": jsonResponse("On TCP without the bearer token or a page session", schema: error),
            "403": jsonResponse("A browser request from another origin", schema: error),
            "421": jsonResponse("A Host this API does not answer to (chorus serve --api-host)", schema: error),
            "413": jsonResponse("The body is over the limit", schema: error),
            "503": jsonResponse("The node is closing or its store cannot take writes now", schema: error),
        ]
        if route.method != .get { out["415"] = jsonResponse("A body that is not JSON (or, for an upload, not the raw file)", schema: error) }
        if route.json, route.method == .get { out["304"] = ["description": "Not modified: the answer's ETag matches If-None-Match"] }
        out["400"] = jsonResponse("Bad input: a malformed id, a missing, unknown or mistyped field, content the rules do not allow", schema: error)
        out["404"] = jsonResponse("The object is not held by this node", schema: error)
        out["409"] = jsonResponse("It contradicts the object's current state (already added, nothing to remove)", schema: error)
        return out
    }

    static func runOperation() -> [String: Any] {
        [
            "operationId": "run", "summary": "Run a chorus command line in this process (Unix socket only; Specs/api.md §4)",
            "requestBody": [
                "required": true,
                "content": [
                    "application/json": [
                        "schema": [
                            "type": "object", "required": ["arguments", "workingDirectory", "errorIsTerminal"],
                            "properties": [
                                "arguments": ["type": "array", "items": ["type": "string"]], "workingDirectory": ["type": "string"],
                                "errorIsTerminal": ["type": "boolean"], "storeVariable": ["type": "string"], "standardInputFile": ["type": "string"],
                            ],
                        ] as [String: Any]
                    ]
                ],
            ] as [String: Any],
            "responses": [
                "200": [
                    "description": "Frames: a type byte (1 output, 2 error, 3 exit status), a 4-byte big-endian length, the payload",
                    "content": [CommandFrame.mediaType: ["schema": ["type": "string", "format": "binary"]]],
                ],
                "404": jsonResponse("Asked on TCP: the command runner is on the Unix socket only", schema: ["$ref": "#/components/schemas/Error"]),
                "400": jsonResponse("Not a command request", schema: ["$ref": "#/components/schemas/Error"]),
            ],
        ]
    }

    static func watchOperation() -> [String: Any] {
        [
            "operationId": "watch",
            "summary": "Server-sent events: the JSON of a GET endpoint, sent first and again whenever a commit changes it (Specs/api.md §6)",
            "parameters": [
                ["name": "path", "in": "query", "required": true, "schema": ["type": "string"], "description": "A GET endpoint with its query, e.g. /v1/chats/ID?limit=50"]
            ],
            "responses": [
                "200": ["description": "An event stream: `data:` lines, each the endpoint's JSON", "content": ["text/event-stream": ["schema": ["type": "string"]]]],
                "400": jsonResponse("Not a GET endpoint of this API", schema: ["$ref": "#/components/schemas/Error"]),
                "401": unauthorized(), "421": hostRefused(),
            ],
        ]
    }
}
#endif
