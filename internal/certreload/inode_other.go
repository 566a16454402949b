//go:build !unix

package certreload

import "io/fs"

func inode(fs.FileInfo) uint64 { return 0 }
