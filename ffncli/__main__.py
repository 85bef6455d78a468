from ffncli.cli.main import main

main()
