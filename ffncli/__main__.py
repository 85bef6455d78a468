from ffncli.cli import main

main()
