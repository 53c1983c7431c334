"""The Ray Data stages of the build: read, chunk, embed (actor pool) and the per-topic reduce."""
