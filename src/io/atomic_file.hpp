// Files a reader never sees half-written: the content goes to a hidden temporary name in the same
// folder, is flushed to disk, and only then appears under its real name (rename, or link when an
// existing file must never be replaced). Every file cnnscale publishes goes through here: results,
// checkpoints, reports, allreduce bench files, sweep records and job scripts, pid files.
#pragma once
#include <sys/types.h>

#include <functional>
#include <string>

namespace cnnscale {

// Writes all of `data` to `fd` (retrying short writes and EINTR); RuntimeError naming `path`.
void write_all(int fd, const std::string& data, const std::string& path);

// "<dir>/.<name>.<host>.<pid>.tmp" for `path` = "<dir>/<name>": hidden, not matching
// *.json/*.csv, and telling which process of which host writes it (see remove_dead_temp_files).
std::string temp_path_for(const std::string& path);

// Removes the temporary files (temp_path_for's names) in `dir` that a process of this host which
// no longer exists left behind (killed midway, or stopped a second time while writing) and that
// nothing wrote for ten minutes; those of other hosts (a shared filesystem) and of live processes
// stay, and so do recent ones (a writer of another PID namespace on a host of the same name). Returns how many were removed. The
// writes below call it once per folder and process.
int remove_dead_temp_files(const std::string& dir);

// Creates or truncates `path` with `content` and permission bits `mode` (less the umask), fsyncs
// and closes it; a symbolic link at `path` is refused, not followed (io/safe_open.hpp). On
// failure the file is removed and RuntimeError names it.
void write_synced_file(const std::string& path, const std::string& content, mode_t mode = 0644);
// The same for a descriptor already open on `path`, which it closes.
void write_synced_fd(int fd, const std::string& path, const std::string& content);

// `content` at `path` (replacing what is there) through temp_path_for(path) and a rename.
void write_file_atomically(const std::string& path, const std::string& content, mode_t mode = 0644);

// The same without flushing to disk: never seen half-written, but after a crash possibly empty. For
// a file rewritten often whose loss costs nothing (a running run's progress.json), where an fsync
// each time would cost milliseconds.
void replace_file_unsynced(const std::string& path, const std::string& content, mode_t mode = 0644);

// For files written by a library (HDF5): `write(tmp)` creates the file at temp_path_for(path); it
// is then flushed to disk and renamed to `path`, and the folder entry flushed. On any failure the
// temporary file is removed and the error rethrown; what was at `path` stays untouched.
void write_atomically_with(const std::string& path, const std::function<void(const std::string& tmp)>& write);

// Flushes a file to disk (RuntimeError on failure), or best effort a folder's entries, so that a
// rename after it publishes complete contents even across a power loss.
void fsync_file(const std::string& path);
void fsync_dir(const std::string& path);

// `content` at the first free name of dir/<stem><ext>, dir/<stem>-1<ext>, ... (never replacing a
// file, even one another process publishes meanwhile: link() fails on an existing name). Returns
// the path. numbered false: dir/<stem><ext> only, a RuntimeError when that name exists.
std::string write_new_file(const std::string& dir, const std::string& stem, const std::string& ext,
                           const std::string& content, bool numbered = true);

// Creates `dir` if needed and checks that a file can be made in it: ConfigError naming it otherwise.
void prepare_writable_dir(const std::string& dir);

}  // namespace cnnscale
