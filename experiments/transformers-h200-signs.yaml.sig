{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJjY2I1OWZkMjNjYTBlNzIyZTkzZmFhYjk2NTk5NTNlYzM2NjlmZDU5ZTQ3YTQ0ZGNhMmMzYTYwMjk4Y2I4ZjI3In0sIm5hbWUiOiJ0cmFuc2Zvcm1lcnMtaDIwMC1zaWducy55YW1sIn1dfQ==",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "MD6MDZYUEYCObEoaxwy2vlXwCz+ob/WOaBICH6l6KR5qqdXDoVKGPbaIsmxkk4n2fzfU3WhC+fYTFehrRnt+CA==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
