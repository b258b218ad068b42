from mrtpo.cli import main

main()
