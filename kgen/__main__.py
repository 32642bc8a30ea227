from kgen.cli.app import main

main()
