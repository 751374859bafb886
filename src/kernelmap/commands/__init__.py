"""One module per command family; each holds thin click commands over `kernelmap.api`
or the producer packages."""
