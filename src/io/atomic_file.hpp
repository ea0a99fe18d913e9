// Files a reader never sees half-written: the content goes to a hidden temporary name in the same
// folder, is flushed to disk, and only then appears under its real name (rename, or link when an
// existing file must never be replaced). Used by the results writer, the report, the allreduce
// bench files and the sweep's emitted job scripts.
#pragma once
#include <sys/types.h>

#include <string>

namespace cnnscale {

// Writes all of `data` to `fd` (retrying short writes and EINTR); RuntimeError naming `path`.
void write_all(int fd, const std::string& data, const std::string& path);

// "<dir>/.<name>.<pid>.tmp" for `path` = "<dir>/<name>": hidden, and not matching *.json/*.csv.
std::string temp_path_for(const std::string& path);

// Creates or truncates `path` with `content` and permission bits `mode` (less the umask), fsyncs
// and closes it;
// on failure the file is removed and RuntimeError names it.
void write_synced_file(const std::string& path, const std::string& content, mode_t mode = 0644);

// `content` at `path` (replacing what is there) through temp_path_for(path) and a rename.
void write_file_atomically(const std::string& path, const std::string& content, mode_t mode = 0644);

// `content` at the first free name of dir/<stem><ext>, dir/<stem>-1<ext>, ... (never replacing a
// file, even one another process publishes meanwhile: link() fails on an existing name). Returns
// the path.
std::string write_new_file(const std::string& dir, const std::string& stem, const std::string& ext,
                           const std::string& content);

}  // namespace cnnscale
