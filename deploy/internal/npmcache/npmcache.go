// Package npmcache prepares a Node.js package folder for the tests as
// "npm ci" and "npm run build" do, keeping what they made in the user's
// cache folder so that the next run, in this checkout or a fresh clone,
// copies it instead of making it again.
//
// make test runs in fresh clones: npm ci (extracting some 2,500 files) and
// tsc took about 13 CPU-seconds of every run, on two cores shared by the
// whole suite. An entry is found by the hash of everything that decides
// its content: for node_modules, package.json, package-lock.json and the
// versions of node and npm; for the build's output, those and every file
// the build reads (tsconfig.json and the source folder). When an input
// changes, the command runs in the folder as before, and its result
// becomes the new entry. A command that fails leaves no entry.
//
// node_modules comes back as hard links (npm replaces files, never writes
// into them, and the tests only read them); the build output, which tsc
// rewrites in place, as copies. Entries live in
// $XDG_CACHE_HOME/acme-platform/npm (~/.cache when unset); one unused for
// two weeks is removed when another is stored, and deleting the folder
// costs the next run its npm ci and build, nothing else.
package npmcache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Run runs a command in dir, as the caller runs commands (logging them).
type Run func(ctx context.Context, dir string, args ...string) error

// unusedFor is how long an entry may go unused before storing another
// removes it.
const unusedFor = 14 * 24 * time.Hour

// Install makes dir/node_modules what "npm ci" makes it.
func Install(ctx context.Context, dir string, run Run) error {
	key, err := installKey(ctx, dir)
	if err != nil {
		return err
	}
	return install(ctx, dir, key, run)
}

func install(ctx context.Context, dir, key string, run Run) error {
	return prepare(ctx, dir, "node_modules-"+key, "node_modules", link, run, "npm", "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error")
}

// InstallAndBuild does what Install does, then makes dir's build output
// (the folder outDir, e.g. "dist") what "npm run build" makes it from the
// sources in srcDir and tsconfig.json.
func InstallAndBuild(ctx context.Context, dir, srcDir, outDir string, run Run) error {
	key, err := installKey(ctx, dir)
	if err != nil {
		return err
	}
	if err := install(ctx, dir, key, run); err != nil {
		return err
	}
	h := sha256.New()
	fmt.Fprintln(h, key, srcDir, outDir)
	if err := hashFile(h, dir, "tsconfig.json"); err != nil {
		return err
	}
	if err := hashTree(h, dir, srcDir); err != nil {
		return err
	}
	return prepare(ctx, dir, "build-"+sum(h), outDir, copyFile, run, "npm", "run", "--silent", "build")
}

// installKey hashes what decides node_modules.
func installKey(ctx context.Context, dir string) (string, error) {
	h := sha256.New()
	for _, name := range []string{"package.json", "package-lock.json"} {
		if err := hashFile(h, dir, name); err != nil {
			return "", err
		}
	}
	for _, tool := range []string{"node", "npm"} {
		out, err := exec.CommandContext(ctx, tool, "--version").Output()
		if err != nil {
			return "", fmt.Errorf("npmcache: %s --version: %w", tool, err)
		}
		fmt.Fprintf(h, "%s %s\n", tool, strings.TrimSpace(string(out)))
	}
	return sum(h), nil
}

// prepare gives dir/out the content of the entry name, or runs the command
// in dir and stores its dir/out as that entry. place puts one file.
func prepare(ctx context.Context, dir, name, out string, place func(from, to string) error, run Run, args ...string) error {
	root, err := cacheRoot()
	if err == nil {
		entry := filepath.Join(root, name)
		if _, err := os.Stat(entry); err == nil {
			if err := os.RemoveAll(filepath.Join(dir, out)); err != nil {
				return fmt.Errorf("npmcache: %w", err)
			}
			if err := placeTree(entry, filepath.Join(dir, out), place); err == nil {
				now := time.Now()
				_ = os.Chtimes(entry, now, now)
				return nil
			}
			// A damaged entry: make it again.
			_ = os.RemoveAll(entry)
		}
	}
	if err := run(ctx, dir, args...); err != nil {
		return err
	}
	if root != "" {
		store(root, name, filepath.Join(dir, out), place)
	}
	return nil
}

// store copies made into the entry name; a failure only costs the next run
// the command.
func store(root, name, made string, place func(from, to string) error) {
	tmp, err := os.MkdirTemp(root, name+".tmp-")
	if err != nil {
		return
	}
	defer os.RemoveAll(tmp)
	if placeTree(made, filepath.Join(tmp, "out"), place) != nil {
		return
	}
	// Another run may have stored it meanwhile: then the rename fails and
	// theirs stays.
	if os.Rename(filepath.Join(tmp, "out"), filepath.Join(root, name)) == nil {
		removeUnused(root, name)
	}
}

// removeUnused removes the entries other than keep that were not used for
// unusedFor, and stores that failed half-way.
func removeUnused(root, keep string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		info, err := e.Info()
		if e.Name() == keep || err != nil || time.Since(info.ModTime()) < unusedFor {
			continue
		}
		_ = os.RemoveAll(filepath.Join(root, e.Name()))
	}
}

func cacheRoot() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	root := filepath.Join(base, "acme-platform", "npm")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	return root, nil
}

// placeTree recreates the tree from at to: folders and symbolic links as
// they are, files through place.
func placeTree(from, to string, place func(from, to string) error) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		target := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			dest, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(dest, target)
		default:
			return place(path, target)
		}
	})
}

// link hard-links a file, or copies it where links cannot go (another file
// system).
func link(from, to string) error {
	if err := os.Link(from, to); err == nil {
		return nil
	}
	return copyFile(from, to)
}

func copyFile(from, to string) (err error) {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	info, err := src.Stat()
	if err != nil {
		return err
	}
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dst.Close()) }()
	_, err = io.Copy(dst, src)
	return err
}

func hashFile(h io.Writer, dir, name string) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("npmcache: %w", err)
	}
	fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(name), len(b))
	_, err = h.Write(b)
	return err
}

// hashTree hashes the names and contents of the files under dir/sub, in
// the walk's lexical order.
func hashTree(h io.Writer, dir, sub string) error {
	return filepath.WalkDir(filepath.Join(dir, sub), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("npmcache: %w", err)
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return fmt.Errorf("npmcache: %w", err)
		}
		return hashFile(h, dir, rel)
	})
}

func sum(h interface{ Sum([]byte) []byte }) string {
	return hex.EncodeToString(h.Sum(nil))[:16]
}
