package medusa.spark;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.DirectoryStream;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.UnsupportedFileSystemException;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager;

/**
 * Spark's checkpoint files (offsets, commits, state changelogs and snapshots) on a local
 * disk through java.nio, with an atomic rename that replaces the file it lands on.
 *
 * <p>Spark's default manager goes through Hadoop's FileContext, which on a local disk
 * without Hadoop's native library runs a {@code readlink} or {@code chmod} process for
 * each file it renames or creates: some two hundred processes per micro-batch of a small
 * stateful query, a third of a core for a node that serves one fragment. Spark's other
 * manager, over Hadoop's FileSystem, runs fewer but cannot replace a file: its rename
 * fails when the target exists and Spark takes that as done, so a state file written again
 * (after a rollback) keeps its old contents. Other file systems (HDFS, S3A) keep Spark's
 * own choice.
 */
public final class LocalCheckpointFileManager implements CheckpointFileManager {
    private static final long BLOCK_SIZE = 32L * 1024 * 1024;

    private final FileSystem local;
    private final Path root;
    /** Spark's own manager, for a path on another file system; null on a local disk. */
    private final CheckpointFileManager elsewhere;

    public LocalCheckpointFileManager(Path path, Configuration conf) throws IOException {
        FileSystem fs = path.getFileSystem(conf);
        if (fs instanceof LocalFileSystem || fs instanceof RawLocalFileSystem) {
            RawLocalFileSystem raw = new RawLocalFileSystem();
            raw.initialize(java.net.URI.create("file:///"), conf);
            this.local = raw;
            this.root = raw.makeQualified(path);
            this.elsewhere = null;
        } else {
            this.local = null;
            this.root = path;
            this.elsewhere = sparksOwn(path, conf);
        }
    }

    /** What Spark picks when no manager is configured. */
    private static CheckpointFileManager sparksOwn(Path path, Configuration conf) {
        try {
            return new FileContextBasedCheckpointFileManager(path, conf);
        } catch (RuntimeException e) {
            throw e;
        } catch (Exception e) {
            if (e instanceof UnsupportedFileSystemException) {
                return new FileSystemBasedCheckpointFileManager(path, conf);
            }
            throw new IllegalStateException(e);
        }
    }

    private java.nio.file.Path onDisk(Path path) {
        return new File(local.makeQualified(path).toUri().getPath()).toPath();
    }

    @Override
    public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
        if (elsewhere != null) {
            return elsewhere.createAtomic(path, overwriteIfPossible);
        }
        java.nio.file.Path target = onDisk(path);
        java.nio.file.Path temp = target.resolveSibling(
            "." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
        try {
            Files.createDirectories(target.getParent());
            OutputStream out = Files.newOutputStream(temp, StandardOpenOption.CREATE_NEW,
                StandardOpenOption.WRITE);
            return new RenamedOnClose(out, temp, target, overwriteIfPossible);
        } catch (IOException e) {
            throw sneaky(e);
        }
    }

    /** Written to a temporary file beside the target, which takes its name on close. */
    private static final class RenamedOnClose extends CancellableFSDataOutputStream {
        private final java.nio.file.Path temp;
        private final java.nio.file.Path target;
        private final boolean overwrite;
        private boolean done;

        RenamedOnClose(OutputStream out, java.nio.file.Path temp, java.nio.file.Path target,
                       boolean overwrite) {
            super(out);
            this.temp = temp;
            this.target = target;
            this.overwrite = overwrite;
        }

        @Override
        public synchronized void close() throws IOException {
            if (done) {
                return;
            }
            done = true;
            try {
                super.close();
                if (overwrite) {
                    // rename(2): the target is replaced in one step, or not at all.
                    Files.move(temp, target, StandardCopyOption.ATOMIC_MOVE);
                } else {
                    // A hard link fails when the target exists, so two writers of the same
                    // batch cannot both succeed (Spark relies on that for its logs).
                    try {
                        Files.createLink(target, temp);
                    } catch (java.nio.file.FileAlreadyExistsException e) {
                        throw new FileAlreadyExistsException(target + " exists");
                    }
                    Files.delete(temp);
                }
            } catch (AtomicMoveNotSupportedException e) {
                Files.deleteIfExists(temp);
                throw new IOException("cannot rename " + temp + " to " + target + " atomically", e);
            } catch (IOException e) {
                Files.deleteIfExists(temp);
                throw e;
            }
        }

        @Override
        public synchronized void cancel() {
            if (done) {
                return;
            }
            done = true;
            try {
                underlyingStream().close();
            } catch (IOException ignored) {
                // the temporary file goes below either way
            }
            try {
                Files.deleteIfExists(temp);
            } catch (IOException e) {
                throw sneaky(e);
            }
        }
    }

    @Override
    public FSDataInputStream open(Path path) {
        if (elsewhere != null) {
            return elsewhere.open(path);
        }
        try {
            return local.open(local.makeQualified(path));
        } catch (IOException e) {
            throw sneaky(e);
        }
    }

    @Override
    public FileStatus[] list(Path path, PathFilter filter) {
        if (elsewhere != null) {
            return elsewhere.list(path, filter);
        }
        Path parent = local.makeQualified(path);
        java.nio.file.Path dir = onDisk(parent);
        List<FileStatus> found = new ArrayList<>();
        try {
            if (!Files.isDirectory(dir)) {
                BasicFileAttributes attributes = Files.readAttributes(dir,
                    BasicFileAttributes.class);
                if (filter.accept(parent)) {
                    found.add(status(parent, attributes));
                }
                return found.toArray(new FileStatus[0]);
            }
            try (DirectoryStream<java.nio.file.Path> entries = Files.newDirectoryStream(dir)) {
                for (java.nio.file.Path entry : entries) {
                    Path child = new Path(parent, entry.getFileName().toString());
                    if (!filter.accept(child)) {
                        continue;
                    }
                    try {
                        found.add(status(child, Files.readAttributes(entry,
                            BasicFileAttributes.class)));
                    } catch (NoSuchFileException gone) {
                        // deleted while listed (e.g. a temporary file renamed)
                    }
                }
            }
        } catch (NoSuchFileException e) {
            throw sneaky(new FileNotFoundException("File " + path + " does not exist"));
        } catch (IOException e) {
            throw sneaky(e);
        }
        return found.toArray(new FileStatus[0]);
    }

    private static FileStatus status(Path path, BasicFileAttributes attributes) {
        return new FileStatus(attributes.isDirectory() ? 0 : attributes.size(),
            attributes.isDirectory(), 1, BLOCK_SIZE, attributes.lastModifiedTime().toMillis(),
            path);
    }

    @Override
    public void mkdirs(Path path) {
        if (elsewhere != null) {
            elsewhere.mkdirs(path);
            return;
        }
        try {
            Files.createDirectories(onDisk(path));
        } catch (IOException e) {
            throw sneaky(e);
        }
    }

    @Override
    public boolean exists(Path path) {
        if (elsewhere != null) {
            return elsewhere.exists(path);
        }
        return Files.exists(onDisk(path));
    }

    @Override
    public void delete(Path path) {
        if (elsewhere != null) {
            elsewhere.delete(path);
            return;
        }
        java.nio.file.Path target = onDisk(path);
        try {
            if (!Files.isDirectory(target)) {
                Files.deleteIfExists(target);
                return;
            }
            Files.walkFileTree(target, new SimpleFileVisitor<java.nio.file.Path>() {
                @Override
                public FileVisitResult visitFile(java.nio.file.Path file,
                                                 BasicFileAttributes attributes)
                        throws IOException {
                    Files.deleteIfExists(file);
                    return FileVisitResult.CONTINUE;
                }

                @Override
                public FileVisitResult postVisitDirectory(java.nio.file.Path dir,
                                                          IOException e) throws IOException {
                    Files.deleteIfExists(dir);
                    return FileVisitResult.CONTINUE;
                }
            });
        } catch (NoSuchFileException gone) {
            // deleting what is not there is done
        } catch (IOException e) {
            throw sneaky(e);
        }
    }

    @Override
    public boolean isLocal() {
        return elsewhere == null || elsewhere.isLocal();
    }

    @Override
    public Path createCheckpointDirectory() {
        if (elsewhere != null) {
            return elsewhere.createCheckpointDirectory();
        }
        mkdirs(root);
        return root;
    }

    @Override
    public void close() {
        if (elsewhere != null) {
            elsewhere.close();
        }
    }

    /** Spark's managers throw Hadoop's checked exceptions undeclared, as Scala does. */
    @SuppressWarnings("unchecked")
    private static <E extends Throwable> RuntimeException sneaky(Throwable e) throws E {
        throw (E) e;
    }
}
