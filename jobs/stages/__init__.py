"""The Ray Data stages of the build: carry, read, chunk, embed (actor pool), per-topic reduce."""
