from ddibench.cli import main

main()
