// Opening the files cnnscale creates or writes in a results tree, which other users of a shared
// cluster may be able to write in too: a symbolic link planted where we create a file would make
// us truncate or append to whatever it points at. So the last path component is never followed
// (O_NOFOLLOW) and temporary files are created exclusively. Lock files, logs, CSV appends and
// every atomic write (io/atomic_file.hpp) go through here.
#pragma once
#include <sys/types.h>

#include <string>

namespace cnnscale {

// open(path, flags | O_NOFOLLOW | O_CLOEXEC, mode). RuntimeError "<path>: is a symbolic link; not
// followed where cnnscale writes a file" when it is one, "<path>: cannot open: <errno text>" for
// any other failure. Returns the descriptor.
int open_no_follow(const std::string& path, int flags, mode_t mode = 0644);

// open_no_follow of `name` relative to the folder `dir_fd` (openat); errors name `shown_path`.
int open_at_no_follow(int dir_fd, const std::string& name, const std::string& shown_path, int flags,
                      mode_t mode = 0644);

// The folder `path` opened for open_at_no_follow (O_DIRECTORY, last component never followed):
// files created relative to it stay in that folder even where a link replaces its path later, as
// may happen while a sweep runs for hours. RuntimeError naming `path` when it is a link.
int open_folder_no_follow(const std::string& path);

// Creates `path` for writing, exclusively: a leftover at that name (our own earlier attempt, or a
// planted link) is unlinked first (unlink never follows a link), then O_CREAT | O_EXCL, which
// fails rather than follow a link created in between. For temporary names only.
int create_exclusive(const std::string& path, mode_t mode = 0644);

// RuntimeError naming `path` when it is a symbolic link (lstat); for folders cnnscale creates
// inside a results tree (logs/), where a link would move what we write elsewhere.
void refuse_link(const std::string& path);

}  // namespace cnnscale
