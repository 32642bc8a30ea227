from kgen.cli.main import main

main()
