from kernelmap.cli import main

main()
