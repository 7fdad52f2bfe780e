#if canImport(Glibc)
import Glibc
#endif

// The CLI lives in CLI.swift; this file only hands it the command line and exits with its status.
// SIGPIPE keeps its default: `searchlight query … | head` ends quietly like any Unix filter (the
// daemon socket itself writes with MSG_NOSIGNAL).
exit(await CLI.main(CommandLine.arguments))
