from attn_cli.launch import main

main()
