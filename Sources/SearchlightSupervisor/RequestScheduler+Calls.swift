import SearchlightWire

extension RequestScheduler {
    /// An interactive call to an extension (item data for a client), typed: the extension's answer
    /// is decoded by the request's response type; one it cannot read is the extension's failure.
    func call<R: WireRequest>(_ host: ExtensionHost, _ request: R) async throws -> R.Response {
        let answer = try await call(host, R.method, request.params)
        do {
            return try R.Response(result: answer)
        } catch {
            throw SearchlightError(.extensionFailed, "\(host.label) answered \(R.method) with what it should not: \(error.message)")
        }
    }
}
