from attn_cli.cli import main

main()
