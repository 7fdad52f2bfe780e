#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
@testable import SearchlightWire

/// The client's `/tmp/searchlight-$UID` fallback: a folder any local user may create first, so it
/// is used only when it is this uid's own and no one else may write in it.
@Suite("Default paths: the /tmp socket folder must be the client's own", .onOwnThreads)
struct DefaultPathsTests {
    @Test("a folder owned by another uid, writable by others, or a link is not trusted")
    func ownedPrivately() throws {
        var template = Array("/tmp/sl-paths-XXXXXX".utf8CString)
        let dir = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let me = getuid()
        #expect(DefaultPaths.ownedPrivately(folder: dir, uid: me))
        #expect(!DefaultPaths.ownedPrivately(folder: dir, uid: me &+ 1))
        chmod(dir, 0o777)
        #expect(!DefaultPaths.ownedPrivately(folder: dir, uid: me))
        chmod(dir, 0o770)
        #expect(!DefaultPaths.ownedPrivately(folder: dir, uid: me))
        chmod(dir, 0o700)
        symlink(dir, dir + "-link")
        defer { unlink(dir + "-link") }
        #expect(!DefaultPaths.ownedPrivately(folder: dir + "-link", uid: me))
        #expect(!DefaultPaths.ownedPrivately(folder: dir + "/absent", uid: me))
        if me == 0 {
            chown(dir, 65534, 65534)
            #expect(!DefaultPaths.ownedPrivately(folder: dir, uid: 0))
        }
    }
}
