{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJjNWQwYzQyYjNiOTllMjE5NGYzOTBhZGZjOTY5MTkxYTM4MDIxNDE1MTFiZjM4NTBmYWUxZjI0ZGUwNmY0ZDk4In0sIm5hbWUiOiJ3b3JrbG9hZC1zaGFyZWdwdC55YW1sIn1dfQ==",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "Ljo9/ydaFsI4j9n62wRmwgnbGrtbXilZf3AlkUg+JGavYaA2EGLCD+sY1kdN0YhSxFyWM88yIO9EvxnOJ04VDA==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
